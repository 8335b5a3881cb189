-- Schema version 15 (PostgreSQL): nothing to change. SQLite's finished indexes now test the
-- status by equalities (its IN list cost a temporary table per row written), and the queries
-- spell it so (stats.FINISHED). PostgreSQL tests its IN lists in place, and its planner proves
-- that those equalities imply the IN list of schedules_done and schedules_finished, so they
-- stay as they are.
SELECT 1
