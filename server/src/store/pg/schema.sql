-- The Postgres store's one schema (the SQLite store's is in store/mod.rs).
-- Run at every start under an advisory lock, so nodes starting together
-- do not race on CREATE. Event data is the same JSON text as in SQLite.
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
-- '$events' numbers every event of every scope: the row lock taken to bump it
-- makes appends commit one at a time, in id order (docs/cluster.md).
INSERT INTO counters (name, value) VALUES ('$events', 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS logs (
  scope TEXT NOT NULL, scope_id TEXT NOT NULL, epoch TEXT NOT NULL,
  head BIGINT NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (scope, scope_id));
CREATE TABLE IF NOT EXISTS events (
  id BIGINT PRIMARY KEY, scope TEXT NOT NULL, scope_id TEXT NOT NULL,
  seq BIGINT NOT NULL, type TEXT NOT NULL, ts TEXT NOT NULL, data TEXT NOT NULL,
  UNIQUE (scope, scope_id, seq));
CREATE TABLE IF NOT EXISTS sessions (
  session_id TEXT PRIMARY KEY, title TEXT NOT NULL, created_at TEXT NOT NULL,
  tasks_version BIGINT NOT NULL DEFAULT 0, background_wait TEXT);
-- A turn is run by the node whose boot `owner` holds its lease; a lease
-- that ran out means that node is gone (docs/cluster.md).
CREATE TABLE IF NOT EXISTS turns (
  row_no BIGINT GENERATED ALWAYS AS IDENTITY,
  turn_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, message_id TEXT NOT NULL,
  text TEXT NOT NULL, state TEXT NOT NULL, owner TEXT NOT NULL,
  lease_until TIMESTAMPTZ NOT NULL, UNIQUE (session_id, message_id));
CREATE TABLE IF NOT EXISTS tools (
  row_no BIGINT GENERATED ALWAYS AS IDENTITY,
  call_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS questions (
  row_no BIGINT GENERATED ALWAYS AS IDENTITY,
  question_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
  state TEXT NOT NULL);
-- Processes and background tasks are leased like turns: a running process
-- or an open task whose lease ran out is failed by another node.
CREATE TABLE IF NOT EXISTS processes (
  row_no BIGINT GENERATED ALWAYS AS IDENTITY,
  process_id TEXT PRIMARY KEY, command TEXT NOT NULL, state TEXT NOT NULL,
  exit_code BIGINT, log TEXT NOT NULL DEFAULT '',
  owner TEXT NOT NULL DEFAULT '', lease_until TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS tasks (
  task_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, ord BIGINT NOT NULL, json TEXT NOT NULL,
  open BOOLEAN NOT NULL DEFAULT false,
  owner TEXT NOT NULL DEFAULT '', lease_until TIMESTAMPTZ NOT NULL DEFAULT now());
-- Stores made before processes and tasks had leases.
ALTER TABLE processes ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT '';
ALTER TABLE processes ADD COLUMN IF NOT EXISTS lease_until TIMESTAMPTZ NOT NULL DEFAULT now();
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS open BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS lease_until TIMESTAMPTZ NOT NULL DEFAULT now();
CREATE TABLE IF NOT EXISTS boots (boot_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, recovery TEXT);
-- The runtime's records beside the logs (provider references, team
-- deliveries, worktrees): one JSON value per (kind, id), in creation order.
CREATE TABLE IF NOT EXISTS records (
  row_no BIGINT GENERATED ALWAYS AS IDENTITY,
  kind TEXT NOT NULL, id TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (kind, id));
