"""Running lessons into a run folder: the runner, the lesson catalog, the folder (lock, resume, signals), the
run's server, the summary and the report. Imports the lesson API and everything below it."""
