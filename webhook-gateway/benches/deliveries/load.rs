//! The load generator: signed GitHub deliveries from `clients` concurrent
//! clients, either back to back (the rate a server sustains) or paced at a
//! fixed rate (its latency at a given load). It drives our gateway and a
//! peer alike, by URL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use cmcp_webhook_gateway::{WebhookSecret, sign};

const SAMPLE: &[u8] =
    include_bytes!("../../../fixtures/data/github/webhooks/webhook-repository-renamed.json");

/// A delivery body of about `bytes` bytes: the renamed-repository sample,
/// padded with a field the parser ignores. Each delivery gets its own
/// bytes (a sequence number in front): a body seen before under a new id
/// is a replay, not a delivery.
#[derive(Clone)]
pub struct Bodies {
    template: Arc<Vec<u8>>,
    /// The next sequence number, shared by every run of these bodies.
    seq: Arc<AtomicUsize>,
}

impl Bodies {
    pub fn of_size(bytes: usize) -> Bodies {
        let mut template = SAMPLE[1..].to_vec();
        let pad = bytes.saturating_sub(SAMPLE.len() + 40);
        if pad > 0 {
            // Hex of a xorshift stream: it does not compress, so neither
            // database gets the padding for free.
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let hex: String = (0..pad)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    char::from(b"0123456789abcdef"[(x & 15) as usize])
                })
                .collect();
            let field = format!("\"bench_pad\":\"{hex}\",");
            template.splice(0..0, field.into_bytes());
        }
        Bodies {
            template: Arc::new(template),
            seq: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A body never sent before by this set.
    pub fn next(&self) -> Vec<u8> {
        self.body(self.seq.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Body number `n` (0 is the one the references insert).
    pub fn body(&self, n: usize) -> Vec<u8> {
        [format!("{{\"bench_seq\":{n},").as_bytes(), &self.template].concat()
    }

    pub fn len(&self) -> usize {
        self.body(0).len()
    }
}

/// What one run measured.
pub struct Figures {
    pub sent: usize,
    pub ok: usize,
    pub elapsed: Duration,
    /// Each request's due time (from the phase's start) and latency.
    timeline: Vec<(Duration, Duration)>,
}

impl Figures {
    /// The figures of a run measured by another client (pgbench's log):
    /// each transaction's due time from the run's start, and its latency
    /// from then; every one counts as sent and answered.
    pub fn from_timeline(timeline: Vec<(Duration, Duration)>, elapsed: Duration) -> Figures {
        Figures {
            sent: timeline.len(),
            ok: timeline.len(),
            elapsed,
            timeline,
        }
    }

    /// Count another run of the same phase in with this one (its rate is
    /// then over both runs' time).
    pub fn absorb(&mut self, other: Figures) {
        let offset = self.elapsed;
        self.sent += other.sent;
        self.ok += other.ok;
        self.elapsed += other.elapsed;
        self.timeline.extend(
            other
                .timeline
                .into_iter()
                .map(|(due, latency)| (offset + due, latency)),
        );
    }

    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64()
    }

    pub fn percentile_ms(&self, p: f64) -> f64 {
        let mut l: Vec<Duration> = self.timeline.iter().map(|(_, latency)| *latency).collect();
        l.sort();
        let i = ((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1));
        l.get(i).copied().unwrap_or_default().as_secs_f64() * 1e3
    }

    /// The slowest request, in ms, and when it was due (s into the
    /// phase): one stall of the server shows here whole, where p99 only
    /// shows it once it delays 1 % of the requests.
    pub fn slowest(&self) -> (f64, f64) {
        self.timeline
            .iter()
            .max_by_key(|(_, latency)| *latency)
            .map_or((0.0, 0.0), |(due, latency)| {
                (latency.as_secs_f64() * 1e3, due.as_secs_f64())
            })
    }

    /// How many requests took longer than `ms`, and the span of their due
    /// times (s into the phase; `None` when there were none): one stall, or
    /// slowness all along.
    pub fn over(&self, ms: f64) -> (usize, Option<(f64, f64)>) {
        let slow = self
            .timeline
            .iter()
            .filter(|(_, latency)| latency.as_secs_f64() * 1e3 > ms)
            .map(|(due, _)| due.as_secs_f64());
        slow.fold((0, None), |(n, span), due| {
            let (first, last) = span.unwrap_or((due, due));
            (n + 1, Some((first.min(due), last.max(due))))
        })
    }
}

/// The generator's own threads, apart from the runtime that serves our
/// gateway. No deployment shares its runtime with a load generator, and
/// the peer (a process of its own, as `wrk`, the generator, is)
/// never did. Apart, over 6 runs alternating with the shared runtime at
/// 7.6 KB on PostgreSQL, ours ÷ pgbench went from 0.98–1.02 to 0.99–1.07
/// and the machine's CPU a delivery from 154–166 to 145–153 µs. One
/// thread a core, as the server.
static GENERATOR: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("load-generator")
        .enable_all()
        .build()
        .expect("the load generator's runtime")
});

/// How requests are issued.
#[derive(Clone, Copy)]
pub enum Pace {
    /// Each client sends its next request when the last is answered.
    Closed,
    /// Request `i` is due at `i / rate` seconds; its latency counts from
    /// then when it is sent late, so a server that falls behind shows it
    /// (and from the client's waking when it is sent on time).
    Rate(f64),
}

/// Run `clients` clients against `url` for `seconds`.
///
/// Each client is one keep-alive HTTP/1.1 connection written and read by
/// hand, as `wrk` does: the generator shares the machine's two cores with
/// the server and the database, so every microsecond it spends is taken
/// from them (reqwest cost more CPU a request than the gateway's own
/// verification). The body is still signed per request, as a platform
/// would, and every answer's status and length are read.
pub async fn run(
    url: &str,
    secret: &str,
    bodies: &Bodies,
    clients: usize,
    pace: Pace,
    seconds: Duration,
) -> Figures {
    let target = url::Url::parse(url).expect("a URL");
    let addr = format!(
        "{}:{}",
        target.host_str().expect("a host"),
        target.port_or_known_default().expect("a port")
    );
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: repository\r\nX-GitHub-Hook-ID: 1\r\n",
        target.path()
    );
    let secret = WebhookSecret::from(secret);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (addr, head, secret, next, bodies) = (
            addr.clone(),
            head.clone(),
            secret.clone(),
            next.clone(),
            bodies.clone(),
        );
        tasks.push(GENERATOR.spawn(async move {
            let (mut sent, mut ok, mut lat) = (0, 0, Vec::new());
            let mut conn: Option<Conn> = None;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let due = match pace {
                    Pace::Closed => Instant::now(),
                    Pace::Rate(r) => started + Duration::from_secs_f64(n as f64 / r),
                };
                if due.duration_since(started) >= seconds {
                    break;
                }
                // Never a timer for a request already due: tokio's timers
                // fire on the next millisecond tick at the earliest, so a
                // sleep until now is a sleep of up to a millisecond, which
                // a closed loop would add to every request. A client that
                // is early sleeps, and its latency counts from when it woke
                // (the timer's lateness is the generator's, not the
                // server's); a client that is late (its last answer came
                // after this request was due) counts from when it was due.
                let due = if Instant::now() < due {
                    tokio::time::sleep_until(due.into()).await;
                    Instant::now()
                } else {
                    due
                };
                let body = bodies.next();
                let signature = sign(&secret, &body);
                let mut request = format!(
                    "{head}X-GitHub-Delivery: {}\r\nX-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\n\r\n",
                    uuid::Uuid::new_v4(),
                    body.len()
                )
                .into_bytes();
                request.extend_from_slice(&body);
                if conn.is_none() {
                    conn = Conn::open(&addr).await;
                }
                let good = match conn.as_mut() {
                    Some(c) => match c.exchange(&request).await {
                        Some(status) => (200..300).contains(&status),
                        None => {
                            conn = None;
                            false
                        }
                    },
                    None => false,
                };
                lat.push((due.duration_since(started), due.elapsed()));
                sent += 1;
                ok += usize::from(good);
            }
            (sent, ok, lat)
        }));
    }
    let mut f = Figures {
        sent: 0,
        ok: 0,
        elapsed: Duration::ZERO,
        timeline: Vec::new(),
    };
    for t in tasks {
        let (sent, ok, lat) = t.await.expect("client task");
        f.sent += sent;
        f.ok += ok;
        f.timeline.extend(lat);
    }
    f.elapsed = started.elapsed();
    f
}

/// One keep-alive connection of a client.
struct Conn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: &str) -> Option<Conn> {
        let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream.set_nodelay(true).ok()?;
        Some(Conn {
            stream,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Send one request and read its whole answer: the status, or `None`
    /// when the connection failed or ended (it is then opened again).
    async fn exchange(&mut self, request: &[u8]) -> Option<u16> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream.write_all(request).await.ok()?;
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&self.buf[..end]).ok()?.to_owned();
                let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
                let header = |name: &str| {
                    head.lines().skip(1).find_map(|l| {
                        let (n, v) = l.split_once(':')?;
                        n.trim()
                            .eq_ignore_ascii_case(name)
                            .then(|| v.trim().to_owned())
                    })
                };
                let whole = match header("content-length") {
                    Some(n) => end + 4 + n.parse::<usize>().ok()?,
                    None if header("transfer-encoding")
                        .is_some_and(|v| v.eq_ignore_ascii_case("chunked")) =>
                    {
                        // Read to the last chunk's marker.
                        loop {
                            if let Some(p) =
                                self.buf[end..].windows(5).position(|w| w == b"0\r\n\r\n")
                            {
                                break end + p + 5;
                            }
                            if self.stream.read_buf(&mut self.buf).await.ok()? == 0 {
                                return None;
                            }
                        }
                    }
                    None => end + 4,
                };
                while self.buf.len() < whole {
                    if self.stream.read_buf(&mut self.buf).await.ok()? == 0 {
                        return None;
                    }
                }
                self.buf.drain(..whole);
                return Some(status);
            }
            if self.stream.read_buf(&mut self.buf).await.ok()? == 0 {
                return None;
            }
        }
    }
}
