// The peer of the `deliveries` bench: a minimal Node webhook receiver that
// verifies GitHub's signature with @octokit/webhooks-methods and stores each
// delivery with one INSERT through `pg` before it answers 202 (no dedupe
// beyond the primary key, no job, no replay check, no cache invalidation).
//
// Optional, and never installed by the build:
//   npm install @octokit/webhooks-methods pg     (in a scratch directory)
//   cp peer.mjs there && cd there
//   DATABASE_URL=postgres://… SECRET=bench-peer-secret PORT=8787 node peer.mjs
// then run the bench with BENCH_PEER_URL=http://127.0.0.1:8787/ .
// It speaks TLS to PostgreSQL, as the gateway does (PGSSL=0 turns it off).
import http from 'node:http';
import { verify } from '@octokit/webhooks-methods';
import pg from 'pg';

const secret = process.env.SECRET ?? 'bench-peer-secret';
const port = Number(process.env.PORT ?? 8787);
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: Number(process.env.POOL ?? 16),
  // Idle connections stay open: with pg's default (closed after 10 s idle)
  // its 16 backends exited during the bench's next phase but one, ours
  // paced at half load, and ours' p99 there read 13-65 ms in 7 runs after
  // a peer phase against 5-9 ms in 7 without one, alternating.
  idleTimeoutMillis: 0,
  ssl: process.env.PGSSL === '0' ? false : { rejectUnauthorized: false },
});
await pool.query(
  'CREATE TABLE IF NOT EXISTS peer_deliveries (id TEXT PRIMARY KEY, body BYTEA NOT NULL)',
);

http
  .createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks);
      try {
        const signature = req.headers['x-hub-signature-256'] ?? '';
        if (!(await verify(secret, body.toString('utf8'), signature))) {
          res.writeHead(401).end('signature verification failed');
          return;
        }
        await pool.query(
          'INSERT INTO peer_deliveries (id, body) VALUES ($1, $2) ON CONFLICT DO NOTHING',
          [req.headers['x-github-delivery'], body],
        );
        res.writeHead(202).end('accepted');
      } catch {
        res.writeHead(503).end('unavailable');
      }
    });
  })
  .listen(port, '127.0.0.1', () => console.log(`peer listening on ${port}`));
