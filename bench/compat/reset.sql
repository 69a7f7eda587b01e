-- mtr.compat_reset(): puts back what a test may leave behind, so that each test starts from what a fresh server
-- has: drops every table, view and routine of `test`, every database the suites create and every account that was
-- not there when the harness took its snapshot (mtr.compat_accounts: an anonymous ''@localhost left by one test
-- shadows the suites' account for the rest), and sets every global variable that differs from the harness's
-- snapshot (mtr.compat_globals: a test that lowers max_allowed_packet and fails before it restores it fails every
-- large statement after it, in the other suite too). Installed by bench/compat/run.sh on the standalone server and on
-- the cluster's master (through its socket), called from prologue.inc and between runs.
CREATE PROCEDURE mtr.compat_reset()
BEGIN
  DECLARE done INT DEFAULT 0;
  DECLARE s VARCHAR(8000);
  DECLARE objects CURSOR FOR
    SELECT CONCAT('DROP ', IF(table_type = 'VIEW', 'VIEW', 'TABLE'), ' IF EXISTS test.`', table_name, '`')
      FROM information_schema.tables WHERE table_schema = 'test'
    UNION ALL
    SELECT CONCAT('DROP ', routine_type, ' IF EXISTS test.`', routine_name, '`')
      FROM information_schema.routines WHERE routine_schema = 'test'
    UNION ALL
    SELECT CONCAT('DROP DATABASE IF EXISTS `', schema_name, '`')
      FROM information_schema.schemata
     WHERE schema_name NOT IN ('information_schema', 'mysql', 'performance_schema', 'sys', 'mtr', 'test', 'test1',
                               'test2', 'app')
    UNION ALL
    SELECT CONCAT('DROP ', IF(u.is_role = 'Y', 'ROLE ', 'USER '), QUOTE(u.user),
                  IF(u.is_role = 'Y', '', CONCAT('@', QUOTE(u.host))))
      FROM mysql.user u
     WHERE NOT EXISTS (SELECT 1 FROM mtr.compat_accounts a WHERE a.user = u.user AND a.host = u.host)
    UNION ALL
    SELECT CONCAT('SET GLOBAL ', g.variable_name, ' = ',
                  IF(g.variable_value REGEXP '^-?[0-9]+$', g.variable_value, QUOTE(g.variable_value)))
      FROM mtr.compat_globals g JOIN information_schema.global_variables v USING (variable_name)
     WHERE NOT (v.variable_value <=> g.variable_value);
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1;
  -- A database holding a stray file cannot be dropped, a read-only variable cannot be set: skip it, as the next test
  -- would have to.
  DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
  SET @compat_fk = @@foreign_key_checks;
  SET foreign_key_checks = 0;
  OPEN objects;
  next_object: LOOP
    FETCH objects INTO s;
    IF done THEN LEAVE next_object; END IF;
    SET @compat_sql = s;
    PREPARE compat_stmt FROM @compat_sql;
    EXECUTE compat_stmt;
    DEALLOCATE PREPARE compat_stmt;
  END LOOP;
  CLOSE objects;
  SET foreign_key_checks = @compat_fk;
END
