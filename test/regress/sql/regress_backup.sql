-- regress_backup: pg_dump keeps bc_join's rows.  Every table of the
-- extension is marked with pg_extension_config_dump (pg_dump leaves out an
-- extension's tables otherwise), and so is every sequence its tables use.
-- Tables not marked (expected: none).
SELECT c.oid::regclass AS table_not_dumped
	FROM pg_class c
	JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bc_join'
	WHERE c.relkind IN ('r', 'p', 'S') AND c.oid <> ALL (e.extconfig)
	ORDER BY 1::text;
-- What is left out of a dump, on purpose: the rows the install script
-- writes itself.
SELECT x.c::regclass AS config_table, x.w AS filter
	FROM pg_extension e, LATERAL unnest(e.extconfig, e.extcondition) AS x(c, w)
	WHERE e.extname = 'bc_join' AND x.w <> ''
	ORDER BY 1::text;
-- How many are marked.
SELECT count(*) >= 33 AS many FROM pg_extension e, LATERAL unnest(e.extconfig) AS c
	WHERE e.extname = 'bc_join';
