//! Opening the parts a command needs, with errors that say what to fix.

use std::sync::Arc;

use anyhow::{Context, Result};
use cmcp_registry::{Cipher, Store, StoreOptions};
use cmcp_worker::{Queue, SyncConnection, SyncContext, WorkerOptions, WorkerState};

use crate::config::Config;

pub struct App {
    pub cfg: Config,
    pub store: Store,
    pub cipher: Cipher,
}

impl App {
    /// Connect, migrate (registry and queue) and load the master key.
    pub async fn open(cfg: Config) -> Result<App> {
        let url = cfg.database_url();
        if url.starts_with("sqlite:") {
            std::fs::create_dir_all(&cfg.data_dir).with_context(|| {
                format!(
                    "cannot create the data directory {}",
                    cfg.data_dir.display()
                )
            })?;
        }
        let store = Store::connect(&url, &StoreOptions::default())
            .await
            .context(
                "cannot open the registry (check --database-url / CMCP_DISCOVERY_DATABASE_URL)",
            )?;
        store
            .migrate()
            .await
            .context("registry migrations failed")?;
        cmcp_worker::queue::setup(&store)
            .await
            .context("queue migrations failed")?;
        let env_key = std::env::var(cmcp_registry::cipher::MASTER_KEY_ENV).ok();
        let cipher = Cipher::load(env_key.as_deref(), &cfg.key_file())
            .context("cannot load the master key")?;
        Ok(App { cfg, store, cipher })
    }

    pub fn queue(&self) -> Queue<SyncConnection> {
        Queue::new(&self.store, &self.cfg.queue)
    }

    pub fn worker_state(&self, opts: &WorkerOptions) -> Arc<WorkerState> {
        Arc::new(WorkerState {
            ctx: SyncContext {
                store: self.store.clone(),
                cipher: self.cipher.clone(),
                http: self.cfg.http.clone(),
                sync: self.cfg.sync.clone(),
                holder: opts.name.clone(),
            },
            queue: self.queue(),
            queue_config: self.cfg.queue.clone(),
        })
    }
}
