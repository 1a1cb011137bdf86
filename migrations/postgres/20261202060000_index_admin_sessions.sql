-- Starting a session first ends the expired ones, and revoking a key ends
-- its sessions: both looked for their rows by a full scan, so a sign-in
-- cost grew with every session ever started. A key's live sessions are
-- also capped (the oldest end first), which reads them newest first.
CREATE INDEX admin_sessions_expiry ON admin_sessions (expires_at);
CREATE INDEX admin_sessions_key ON admin_sessions (key_id, created_at);
