-- wrk script: POST pre-made JSON bodies, one per line of the file named by
-- the environment variable BENCH_BODIES, each sent once.  wrk's threads each
-- take every n-th line (thread k: lines k, k+n, ...), so no body goes twice;
-- a thread that runs out starts over and says so at the end ("wrapped").
local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  local path = os.getenv("BENCH_BODIES")
  local nthreads = tonumber(os.getenv("BENCH_THREADS") or "1")
  bodies = {}
  local i = 0
  for line in io.lines(path) do
    if i % nthreads == tid then
      bodies[#bodies + 1] = line
    end
    i = i + 1
  end
  idx = 0
  wrapped = 0
  non200 = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  idx = idx + 1
  if idx > #bodies then
    idx = 1
    wrapped = wrapped + 1
  end
  return wrk.format(nil, nil, nil, bodies[idx])
end

function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
  end
end

function done(summary, latency, requests)
  local w, n, used = 0, 0, 0
  for _, t in ipairs(threads) do
    w = w + (t:get("wrapped") or 0)
    n = n + (t:get("non200") or 0)
    used = used + (t:get("idx") or 0)
  end
  io.write(string.format("bench: requests=%d p50_us=%d p99_us=%d non200=%d wrapped=%d bodies_used=%d\n",
    summary.requests, latency:percentile(50), latency:percentile(99), n, w, used))
end
