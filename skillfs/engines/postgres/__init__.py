"""PostgreSQL: a dialect of the SQL core, with pushed notifications (docs/engine-postgres.md)."""
