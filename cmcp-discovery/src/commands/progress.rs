//! What `sync --wait` and `reconcile --wait` show while a run goes: the
//! figures its worker writes to the run row as it goes (pages and items so
//! far, requests, budget waits). On a terminal a spinner line (indicatif)
//! redrawn in place; otherwise one plain line each time the figures change,
//! so a log or a CI job shows the same. Both go to stderr: stdout stays the
//! result (and valid JSON with `--json`).

use std::io::IsTerminal;
use std::time::Duration;

use cmcp_domain::RunFigures;
use cmcp_registry::SyncRunRow;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One line of progress: `pages 3  items 60  requests 4  budget waits 0`.
pub fn line(f: &RunFigures) -> String {
    format!(
        "pages {}  items {}  requests {}  retries {}  budget waits {}",
        f.pages, f.items_seen, f.requests, f.retries, f.rate_limit_waits
    )
}

/// Shows the progress of one awaited run.
pub enum Progress {
    Bar(ProgressBar),
    Plain {
        label: String,
        last: Option<RunFigures>,
    },
}

impl Progress {
    /// A spinner when stderr is a terminal, plain lines otherwise.
    pub fn new(label: &str) -> Progress {
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(label.to_owned());
            bar.set_message("queued");
            bar.enable_steady_tick(Duration::from_millis(120));
            Progress::Bar(bar)
        } else {
            Progress::Plain {
                label: label.to_owned(),
                last: None,
            }
        }
    }

    /// The run as last read (still running).
    pub fn update(&mut self, run: &SyncRunRow) {
        match self {
            Progress::Bar(bar) => bar.set_message(line(&run.figures)),
            Progress::Plain { label, last } => {
                if last.as_ref() != Some(&run.figures) {
                    eprintln!("{label}: {} {}", run.id, line(&run.figures));
                    *last = Some(run.figures.clone());
                }
            }
        }
    }

    /// The run ended (or the wait did): clear the spinner line.
    pub fn finish(self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_pages_items_requests_and_budget_waits() {
        let f = RunFigures {
            pages: 3,
            items_seen: 60,
            requests: 4,
            rate_limit_waits: 2,
            ..RunFigures::default()
        };
        assert_eq!(
            line(&f),
            "pages 3  items 60  requests 4  retries 0  budget waits 2"
        );
    }
}
