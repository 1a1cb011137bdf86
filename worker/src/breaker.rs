//! The breaker against mass missing: a complete listing that suddenly lacks
//! a large part of a connection's spaces (a token that lost access, an
//! upstream incident) marks nothing; the connection is held until an ADMIN
//! confirms (`connection confirm-missing`) or a later complete listing
//! agrees with the registry.

use cmcp_domain::{RiskCode, RiskNotice};
use cmcp_registry::{HoldRow, MissingPreview};

use crate::sync::SyncConfig;

/// Why the listing must not mark anything, when it must not.
pub fn trips(cfg: &SyncConfig, preview: &MissingPreview) -> Option<String> {
    let n = preview.would_miss.len() as u64;
    if n == 0 {
        return None;
    }
    let share = n as f64 / preview.seen_before.max(1) as f64;
    let of = preview.seen_before;
    if n > cfg.max_missing {
        Some(format!(
            "a complete listing lacked {n} of {of} spaces, more than max_missing ({})",
            cfg.max_missing
        ))
    } else if share > cfg.max_missing_fraction {
        Some(format!(
            "a complete listing lacked {n} of {of} spaces ({:.0} %), more than max_missing_fraction ({:.0} %)",
            share * 100.0,
            cfg.max_missing_fraction * 100.0
        ))
    } else {
        None
    }
}

/// The risk notice a held connection shows the ADMIN.
pub fn notice(connection_id: &str, hold: &HoldRow) -> RiskNotice {
    RiskNotice {
        code: RiskCode::MassMissing,
        message: format!(
            "held: {} of {} spaces would be marked missing; {}. Nothing was marked. \
             If they are really gone, confirm with `cmcp-discovery connection confirm-missing {connection_id} --reason …`; \
             otherwise check the token's access: the hold clears when a complete listing agrees with the registry",
            hold.would_miss, hold.seen_before, hold.reason
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preview(seen_before: u64, missing: usize) -> MissingPreview {
        MissingPreview {
            seen_before,
            would_miss: (0..missing).map(|i| format!("space:{i}")).collect(),
        }
    }

    #[test]
    fn trips_above_either_bound_only() {
        let cfg = SyncConfig::default();
        assert_eq!(trips(&cfg, &preview(13, 1)), None, "1 of 13 is 7.7 %");
        assert!(trips(&cfg, &preview(12, 8)).is_some(), "two thirds");
        assert_eq!(trips(&cfg, &preview(1000, 50)), None, "5 %, exactly 50");
        assert!(
            trips(&cfg, &preview(1000, 51))
                .unwrap()
                .contains("max_missing (50)")
        );
        assert_eq!(trips(&cfg, &preview(0, 0)), None);
    }
}
