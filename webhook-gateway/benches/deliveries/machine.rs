//! What the machine itself says while a phase runs: its load average, how
//! long tasks stalled (`/proc/pressure`), and how busy its cores were
//! (`/proc/stat`). All three are Linux's; elsewhere they read as unknown.

use std::time::Duration;

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Page cache waiting to be written back (`Dirty` and `Writeback` in
/// `/proc/meminfo`), in MB. Runs started right after a build, while its
/// output was still being written, were up to half as fast on SQLite as
/// runs on a settled machine; the header of each phase shows how much was
/// still pending.
pub fn unwritten() -> String {
    let Ok(text) = std::fs::read_to_string("/proc/meminfo") else {
        return "unknown".into();
    };
    let kib = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    format!(
        "{:.0} MB",
        (kib("Dirty:") + kib("Writeback:")) as f64 / 1024.0
    )
}

/// Microseconds some task stalled for CPU and for IO, since boot.
pub fn pressure() -> Option<(u64, u64)> {
    let some_total = |what: &str| -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/pressure/{what}")).ok()?;
        let line = text.lines().find(|l| l.starts_with("some "))?;
        line.split_whitespace()
            .find_map(|f| f.strip_prefix("total="))?
            .parse()
            .ok()
    };
    Some((some_total("cpu")?, some_total("io")?))
}

/// Clock ticks a second in `/proc/stat` (USER_HZ: proc(5) gives 100 on
/// the architectures this runs on).
const USER_HZ: f64 = 100.0;

/// The machine's CPU time since boot, all cores: busy and in all (in
/// clock ticks). Busy is everything but idle and IO wait; time stolen by
/// the hypervisor counts as busy (the work did not get it either).
#[derive(Clone, Copy)]
pub struct Cpu {
    busy: u64,
    all: u64,
}

impl Cpu {
    pub fn now() -> Option<Cpu> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        let fields: Vec<u64> = text
            .lines()
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal (guest time is
        // already inside user and nice).
        let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = fields[..] else {
            return None;
        };
        let busy = user + nice + system + irq + softirq + steal;
        Some(Cpu {
            busy,
            all: busy + idle + iowait,
        })
    }

    /// How the cores were used from `self` until now, for `ops` things
    /// done meanwhile.
    pub fn used_since(self, ops: f64) -> Option<Used> {
        let now = Cpu::now()?;
        let (busy, all) = (now.busy - self.busy, now.all - self.all);
        if all == 0 || ops <= 0.0 {
            return None;
        }
        Some(Used {
            share: busy as f64 / all as f64,
            per_op: Duration::from_secs_f64(busy as f64 / USER_HZ / ops),
        })
    }
}

/// The machine's cores over a phase: the busy share, and the busy CPU
/// time (all processes: server, database, load generator) per operation.
pub struct Used {
    pub share: f64,
    pub per_op: Duration,
}

impl std::fmt::Display for Used {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "machine {:.0}% busy, {:.0} µs CPU each",
            self.share * 100.0,
            self.per_op.as_secs_f64() * 1e6
        )
    }
}
