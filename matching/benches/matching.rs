//! The pure ladder on 10,000 / 100,000 / 1,000,000 spaces against 10,000
//! places, in memory. Each size runs in a child process of this binary so
//! its peak memory (VmHWM) is its own; the parent prints the table.
//!
//! Spaces: one in five is a container (Bitbucket project), the rest repos
//! in those containers with a git remote. Containers: a quarter carry a
//! place's key, a quarter a place's name in another spelling, a quarter a
//! misspelt place name (fuzzy rung), a quarter nothing known; one repo in
//! fifty shares a remote with a repo of a mapped container.

use std::collections::HashMap;
use std::process::Command;
use std::time::Instant;

use cmcp_domain::{AliasKind, SpaceAddress, SpaceKind};
use cmcp_matching::{Place, Settings, Space, propose};

const PLACES: usize = 10_000;
const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn places() -> Vec<Place> {
    (0..PLACES)
        .map(|i| Place {
            id: format!("place-{i}"),
            name: format!("Team {} {}", WORDS[i % WORDS.len()], i),
            key: Some(format!("K{i}")),
            retired: false,
            aliases: vec![],
        })
        .collect()
}

const WORDS: [&str; 8] = [
    "Payments", "Ledger", "Mobile", "Search", "Billing", "Identity", "Growth", "Data",
];

fn spaces(n: usize) -> (Vec<Space>, HashMap<SpaceAddress, String>) {
    let containers = n / 5;
    let mut out = Vec::with_capacity(n);
    let mut mappings = HashMap::new();
    for c in 0..containers {
        let p = c % PLACES;
        let (name, key) = match c % 4 {
            0 => (format!("proj {c}"), Some(format!("k{p}"))),
            1 => (
                format!("team_{}-{}", WORDS[p % WORDS.len()].to_lowercase(), p),
                None,
            ),
            2 => (format!("Team {} {}x", WORDS[p % WORDS.len()], p), None),
            _ => (format!("unknown-{c}-zz"), None),
        };
        let address =
            SpaceAddress::new(SpaceKind::BitbucketProject, "acme", &format!("c{c}")).unwrap();
        if c % 97 == 0 {
            mappings.insert(address.clone(), format!("place-{p}"));
        }
        out.push(Space {
            address,
            name,
            container: None,
            key,
            fingerprints: vec![],
        });
    }
    for r in 0..n - containers {
        let c = r % containers.max(1);
        let container = out[c].address.clone();
        // One repo in fifty mirrors a repo of a mapped container.
        let remote = if r % 50 == 0 {
            format!("example.com/acme/repo-{}", (r / 97) * 97)
        } else {
            format!("example.com/acme/repo-{r}")
        };
        out.push(Space {
            address: SpaceAddress::new(SpaceKind::BitbucketRepo, "acme", &format!("r{r}")).unwrap(),
            name: format!("PAY-repo-{r}"),
            container: Some(container),
            key: None,
            fingerprints: vec![(AliasKind::GitRemote, remote)],
        });
    }
    (out, mappings)
}

fn child(n: usize) {
    let places = places();
    let (spaces, mappings) = spaces(n);
    let input_kb = status_kb("VmRSS:");
    let started = Instant::now();
    let candidates = propose(&places, &spaces, &mappings, &Settings::default());
    let elapsed = started.elapsed();
    let evidence: usize = candidates.iter().map(|c| c.evidence.len()).sum();
    println!(
        "{n}\t{}\t{}\t{evidence}\t{:.3}\t{input_kb}\t{}",
        n / 5,
        candidates.len(),
        elapsed.as_secs_f64(),
        status_kb("VmHWM:")
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(args[i + 1].parse().expect("size"));
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    println!("matching ladder, {PLACES} places, each size in its own process");
    println!(
        "{:>10} {:>11} {:>11} {:>10} {:>10} {:>14} {:>13}",
        "spaces", "containers", "candidates", "evidence", "ladder s", "input RSS MiB", "peak MiB"
    );
    for n in SIZES {
        let out = Command::new(&exe)
            .args(["--child", &n.to_string()])
            .output()
            .expect("run child");
        assert!(
            out.status.success(),
            "size {n} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<&str> = line.trim().split('\t').collect();
        let mib = |kb: &str| kb.parse::<f64>().unwrap_or(0.0) / 1024.0;
        println!(
            "{:>10} {:>11} {:>11} {:>10} {:>10} {:>14.1} {:>13.1}",
            f[0],
            f[1],
            f[2],
            f[3],
            f[4],
            mib(f[5]),
            mib(f[6])
        );
    }
}
