"""The SQL engines' shared core: the schema, its migrations, the commit and the log, written
once over a dialect (SQLite, PostgreSQL)."""
