-- bc_join 0.7.0 -> 0.8.0 (ALTER EXTENSION bc_join UPDATE).
-- Every change made to sql/bc_join.sql for 0.8.0 has its equivalent here
-- (docs/development.md, "Changing the schema"); test/tools/upgrade-check
-- proves a 0.7.0 database updated by this script equals a fresh 0.8.0.
\echo Use "ALTER EXTENSION bc_join UPDATE" to load this file. \quit
