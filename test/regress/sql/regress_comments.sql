-- regress_comments: every function and view of bc_join says what it does in
-- \df+ / \dv+ / \dt+: a COMMENT on each function of the extension (schema
-- bc_join and public.bc_join) except trigger functions, on each view and on
-- each table.
-- Functions without a comment (expected: none).
SELECT p.oid::regprocedure AS function
	FROM pg_proc p
	JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
		AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bc_join'
	WHERE p.prorettype <> 'trigger'::regtype
	  AND obj_description(p.oid, 'pg_proc') IS NULL
	ORDER BY 1::text;
-- Views without a comment (expected: none).
SELECT c.oid::regclass AS view
	FROM pg_class c
	JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
		AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bc_join'
	WHERE c.relkind = 'v' AND obj_description(c.oid, 'pg_class') IS NULL
	ORDER BY 1::text;
-- Tables without a comment (expected: none).
SELECT c.oid::regclass AS "table"
	FROM pg_class c
	JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
		AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bc_join'
	WHERE c.relkind = 'r' AND obj_description(c.oid, 'pg_class') IS NULL
	ORDER BY 1::text;
-- The check sees the extension's tables: all 33 of 0.3.0.
SELECT count(*) >= 33 AS many_tables
	FROM pg_class c
	JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid
		AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bc_join'
	WHERE c.relkind = 'r';
-- The check sees the extension's functions: how many, and the public entry point.
SELECT count(*) >= 30 AS many_functions, bool_or(p.oid = 'public.bc_join(jsonb)'::regprocedure) AS has_bc_join
	FROM pg_proc p
	JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
		AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'bc_join';
-- One, as \df+ shows it.
SELECT obj_description('bc_join.create_tenant(text)'::regprocedure, 'pg_proc');
