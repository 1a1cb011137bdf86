//! The parts of a running deployment, in this process: the webhook gateway
//! on a loopback port and a worker on the store's queues.

use std::sync::Arc;
use std::time::Duration;

use cmcp_fixtures::WebhookTarget;
use cmcp_registry::Store;
use cmcp_registry::testing::cipher;
use cmcp_webhook_gateway::{EdgeState, GatewayConfig, Hooks, router};
use cmcp_worker::{Queue, QueueConfig, SyncContext, WorkerOptions, WorkerState, run_workers};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The webhook gateway (webhook routes on, cipher of the tests) on a free
/// loopback port; returns its base URL.
pub async fn serve_gateway(store: &Store) -> (String, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(EdgeState {
        store: store.clone(),
        metrics: None,
        hooks: Some(Hooks::new(cipher(), GatewayConfig::default())),
    });
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), task)
}

impl crate::Harness {
    /// A gateway for the connection, with the simulated org's webhook
    /// (`hook_id`, the connection's current secret) pointed at it; the
    /// gateway's task.
    pub async fn hook_gateway(&self, hook_id: u64) -> JoinHandle<()> {
        let secret = self
            .store()
            .current_webhook_secret(&cipher(), crate::CONNECTION)
            .await
            .unwrap();
        let (base, gateway) = serve_gateway(self.store()).await;
        self.sim.set_webhook(Some(WebhookTarget {
            url: format!("{base}/hooks/github/{}", crate::CONNECTION),
            secret: secret.expose().to_owned(),
            hook_id,
        }));
        gateway
    }
}

/// A worker running in this process until `stop`.
pub struct RunningWorker {
    stop: oneshot::Sender<()>,
    task: JoinHandle<cmcp_worker::Result<()>>,
}

/// Start a worker on the store's queues with `ctx` (its holder renamed to
/// the worker's unique name), polling every 50 ms.
pub fn start_worker(store: &Store, ctx: &SyncContext) -> RunningWorker {
    let qcfg = QueueConfig {
        poll_interval: Duration::from_millis(50),
        ..QueueConfig::default()
    };
    let opts = WorkerOptions::unique("it");
    let mut ctx = ctx.clone();
    ctx.holder = opts.name.clone();
    let state = Arc::new(WorkerState {
        ctx,
        queue: Queue::new(store, &qcfg),
        queue_config: qcfg,
        schedule: None,
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(run_workers(state, opts, async move {
        let _ = stopped.await;
    }));
    RunningWorker { stop, task }
}

impl RunningWorker {
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}
