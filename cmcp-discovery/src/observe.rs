//! The process's metrics: one Prometheus recorder per process, installed
//! with the buckets of every histogram any crate records (the gateway's,
//! the worker's, the connectors'), every help text, and a sampler that
//! reads the store's gauges (queues, connections, staleness) every
//! `metrics_sample_every` and runs the exporter's upkeep.

use std::sync::OnceLock;
use std::time::Duration;

use cmcp_registry::Store;
use cmcp_webhook_gateway::PrometheusHandle;
use tracing::warn;

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's recorder, installed on the first call.
pub fn recorder() -> Option<PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let histograms: Vec<(&str, &[f64])> = cmcp_worker::metrics::HISTOGRAMS
                .iter()
                .chain(cmcp_connectors::common::metrics::HISTOGRAMS)
                .copied()
                .collect();
            let handle = cmcp_webhook_gateway::install_metrics_with(&histograms);
            if handle.is_some() {
                cmcp_worker::metrics::describe();
                cmcp_connectors::common::metrics::describe();
            } else {
                warn!("could not install the metrics recorder; /metrics answers 404");
            }
            handle
        })
        .clone()
}

/// Sample the store's gauges now and then every `every`, with the
/// exporter's upkeep (it folds recorded histogram values into their
/// buckets, so memory stays bounded between scrapes). Runs until the
/// process ends.
pub fn spawn_sampler(store: Store, handle: PrometheusHandle, every: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = cmcp_worker::metrics::sample(&store).await {
                warn!(error = %e, "could not sample the store's metrics");
            }
            handle.run_upkeep();
        }
    });
}
