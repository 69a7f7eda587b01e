-- mtr.compat_reset(): drops every table, view and routine of `test` and every database the suites create, so
-- that each test starts from what a fresh server has. Installed by bench/compat/run.sh on the standalone server
-- and on the cluster's master (through its socket), called from prologue.inc.
CREATE PROCEDURE mtr.compat_reset()
BEGIN
  DECLARE done INT DEFAULT 0;
  DECLARE s VARCHAR(300);
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
                               'test2', 'app');
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = 1;
  -- A database holding a stray file cannot be dropped: skip it, as the next test would have to.
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
