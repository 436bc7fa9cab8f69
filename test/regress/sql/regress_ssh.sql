-- regress_ssh: what issue_ssh_host_cert takes from a stranger before any
-- proof is checked (issue 47): every malformed, oversized or unsupported
-- SSH public key blob is 22023 (INVALID_INPUT), never a crash, and nothing
-- is written; a well-formed key with a bad proof is the one refusal.  Also
-- the SSH name and template checks, and the empty KRL byte for byte.
\set VERBOSITY default
\set SHOW_CONTEXT never
CREATE FUNCTION pg_temp.s(t text) RETURNS bytea LANGUAGE sql AS $$
	SELECT int4send(octet_length(convert_to(t, 'UTF8'))) || convert_to(t, 'UTF8') $$;
CREATE FUNCTION pg_temp.b(x bytea) RETURNS bytea LANGUAGE sql AS $$
	SELECT int4send(octet_length(x)) || x $$;
-- A call's SQLSTATE and message, or its answer.
CREATE FUNCTION pg_temp.try(key bytea, proof text DEFAULT 'a.b.c') RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	RETURN bc_join.issue_ssh_host_cert(jsonb_build_object('sshPublicKey', translate(encode(key, 'base64'), E'\n', ''),
														  'proof', proof))::text;
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
CREATE FUNCTION pg_temp.try_raw(req jsonb) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	RETURN bc_join.issue_ssh_host_cert(req)::text;
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
CREATE TEMP TABLE before AS
	SELECT (SELECT count(*) FROM bc_join.ssh_certs) AS certs,
		   (SELECT count(*) FROM bc_join.audit_log) AS audit;
-- Well-formed blobs: Ed25519 (any 32 bytes), ECDSA P-256 (the generator point).
\set ed '\'\\x0000000b7373682d6564323535313900000020' 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\'::bytea'
SELECT pg_temp.s('ecdsa-sha2-nistp256') || pg_temp.s('nistp256') || pg_temp.b(
	'\x046b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c2964fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5'::bytea) AS p256 \gset
-- The whole error, once.
SELECT bc_join.issue_ssh_host_cert('{"sshPublicKey": "AAAA", "proof": "a.b.c"}');
-- Shapes
SELECT pg_temp.try_raw('[]');
SELECT pg_temp.try_raw('{}');
SELECT pg_temp.try_raw('{"proof": "a.b.c"}');
SELECT pg_temp.try_raw(jsonb_build_object('sshPublicKey', encode(:ed, 'base64')));
SELECT pg_temp.try_raw(jsonb_build_object('sshPublicKey', encode(:ed, 'base64'), 'proof', 'a.b.c', 'csr', 'x'));
SELECT pg_temp.try_raw(jsonb_build_object('sshPublicKey', 5, 'proof', 'a.b.c'));
SELECT pg_temp.try_raw(jsonb_build_object('sshPublicKey', encode(:ed, 'base64'), 'proof', repeat('a', 4097)));
SELECT pg_temp.try_raw(jsonb_build_object('sshPublicKey', 'not base64!', 'proof', 'a.b.c'));
SELECT pg_temp.try_raw(jsonb_build_object('sshPublicKey', '', 'proof', 'a.b.c'));
SELECT pg_temp.try_raw(jsonb_build_object('sshPublicKey', repeat('A', 1372), 'proof', 'a.b.c'));
SELECT pg_temp.try_raw(jsonb_build_object('sshPublicKey', repeat('A', 70000), 'proof', 'a.b.c'));
-- Blobs
SELECT pg_temp.try(substr(:ed, 1, 50));
SELECT pg_temp.try(:ed || '\x00'::bytea);
SELECT pg_temp.try('\x00000000'::bytea);
SELECT pg_temp.try('\xffffffff'::bytea);
SELECT pg_temp.try(pg_temp.s('ssh-ed25519') || pg_temp.b('\x0102'::bytea));
SELECT pg_temp.try(pg_temp.s('ssh-rsa') || pg_temp.b('\x010001'::bytea) || pg_temp.b(('\x00' || repeat('c3', 256))::bytea));
SELECT pg_temp.try(pg_temp.s('ssh-dss') || pg_temp.b('\x01'::bytea) || pg_temp.b('\x02'::bytea)
				   || pg_temp.b('\x03'::bytea) || pg_temp.b('\x04'::bytea));
SELECT pg_temp.try(pg_temp.s('sk-ssh-ed25519@openssh.com') || pg_temp.b(substr(:ed, 20)) || pg_temp.s('ssh:'));
SELECT pg_temp.try(pg_temp.s('ssh-ed25519-cert-v01@openssh.com') || pg_temp.b('\x00'::bytea));
-- P-256: off the curve (x+1), the curve named otherwise, compressed, the point at infinity
SELECT pg_temp.try(overlay(:'p256'::bytea placing '\x6c'::bytea from 40 for 1));
SELECT pg_temp.try(pg_temp.s('ecdsa-sha2-nistp256') || pg_temp.s('nistp384') || substr(:'p256'::bytea, 40 - 4));
SELECT pg_temp.try(pg_temp.s('ecdsa-sha2-nistp256') || pg_temp.s('nistp256') || pg_temp.b(substr(:'p256'::bytea, 40, 33)));
SELECT pg_temp.try(pg_temp.s('ecdsa-sha2-nistp256') || pg_temp.s('nistp256') || pg_temp.b('\x00'::bytea));
SELECT pg_temp.try(pg_temp.s('ecdsa-sha2-nistp999') || pg_temp.s('nistp999') || substr(:'p256'::bytea, 36));
-- Well-formed keys, a proof that is none: the one refusal, nothing written but its event.
SELECT pg_temp.try(:ed);
SELECT pg_temp.try(:'p256'::bytea);
SELECT (SELECT count(*) FROM bc_join.ssh_certs) = certs AS no_certificate,
	   (SELECT count(*) FROM bc_join.audit_log) = audit AS no_audit_row FROM before;
-- Names and templates
SELECT k, left(n, 24) AS n, bc_join.ssh_name_valid(k, n) FROM (VALUES ('host', 'web.example'), ('host', 'Web.example'),
	('host', '10.1.2.3'), ('host', 'a-.example'), ('host', repeat('a', 64) || '.example'),
	('host', 'x_y.example'), ('host', ''), ('user', 'root'), ('user', 'a b'), ('user', 'svc@corp'),
	('user', repeat('u', 256)), ('other', 'x')) AS v(k, n);
SELECT k, p, n, bc_join.ssh_name_matches(k, p, n) FROM (VALUES ('host', '*.a.example', 'x.a.example'),
	('host', '*.a.example', 'a.example'), ('host', '*.a.example', 'x.y.a.example'), ('host', '*.a.example', 'xa.example'),
	('user', 'svc-*', 'svc-db'), ('user', 'svc-*', 'svc'), ('user', 'svc_*', 'svcXdb'), ('user', 'root', 'root')) AS v(k, p, n);
SELECT k, t, bc_join.ssh_template_valid(k, t) FROM (VALUES ('host', '{node}.nodes.example'),
	('host', '{session}.example'), ('host', '{hostname}'), ('user', '{session}'), ('user', 'u-{node}'),
	('user', '{tenant}'), ('user', '{session'), ('host', 'UPPER.example')) AS v(k, t);
SELECT bc_join.revoke_ssh_certificate(12345, 'unspecified');
-- No revocation yet: version 0 at the epoch, no section.
SELECT encode(bc_join.ssh_krl(), 'hex');
