//! Opening the parts a command needs, with errors that say what to fix.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use cmcp_registry::cipher::MASTER_KEY_ENV;
use cmcp_registry::{Cipher, MissingKey, Store};
use cmcp_worker::{
    Queue, ScheduleSettings, SyncConnection, SyncContext, UpkeepSettings, WorkerOptions,
    WorkerState,
};

use crate::config::Config;

pub struct App {
    pub cfg: Config,
    pub store: Store,
    pub cipher: Cipher,
}

impl App {
    /// Connect, migrate (registry and queue), load the master key and prove
    /// it opens the registry's secrets.
    ///
    /// The key rules: on PostgreSQL (a fleet) the key must come from
    /// `CMCP_DISCOVERY_MASTER_KEY`, so no member ever makes its own; on
    /// SQLite a key file is created only together with a new database. A
    /// key that does not open the store fails here, naming where it came
    /// from, instead of at the first sync.
    ///
    /// `keep` opens the store's pool whole and keeps it (`serve`, `worker`,
    /// `gateway`: see `[store] min_connections`); a one-shot command opens
    /// connections as it needs them.
    pub async fn open(cfg: Config, keep: bool) -> Result<App> {
        let url = cfg.database_url();
        if url.starts_with("sqlite:") {
            std::fs::create_dir_all(&cfg.data_dir).with_context(|| {
                format!(
                    "cannot create the data directory {}",
                    cfg.data_dir.display()
                )
            })?;
        }
        let store = Store::connect(&url, &cfg.store.options(keep))
            .await
            .context(
                "cannot open the registry (check --database-url / CMCP_DISCOVERY_DATABASE_URL)",
            )?;
        let env_key = std::env::var(MASTER_KEY_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty());
        if matches!(store, Store::Postgres(_)) && env_key.is_none() {
            bail!(
                "{MASTER_KEY_ENV} is not set: every process on PostgreSQL must be given the \
                 fleet's master key (a key file is only made for a new SQLite database)"
            );
        }
        let missing = if store
            .is_new()
            .await
            .context("cannot inspect the registry")?
        {
            MissingKey::Create
        } else {
            MissingKey::Refuse
        };
        store
            .migrate()
            .await
            .context("registry migrations failed")?;
        cmcp_worker::queue::setup(&store)
            .await
            .context("queue migrations failed")?;
        let (cipher, source) = Cipher::load(env_key.as_deref(), &cfg.key_file(), missing)
            .context("cannot load the master key")?;
        store
            .check_master_key(&cipher)
            .await
            .with_context(|| format!("the master key from {source} does not open this registry"))?;
        Ok(App { cfg, store, cipher })
    }

    pub fn queue(&self) -> Queue<SyncConnection> {
        Queue::new(&self.store, &self.cfg.queue)
    }

    pub fn worker_state(&self, opts: &WorkerOptions) -> Arc<WorkerState> {
        Arc::new(self.state(opts))
    }

    fn state(&self, opts: &WorkerOptions) -> WorkerState {
        WorkerState {
            ctx: SyncContext {
                store: self.store.clone(),
                cipher: self.cipher.clone(),
                http: self.cfg.http.clone(),
                sync: self.cfg.sync.clone(),
                holder: opts.name.clone(),
            },
            queue: self.queue(),
            queue_config: self.cfg.queue.clone(),
            schedule: None,
        }
    }

    /// The state of a long-running worker (`serve`, `worker`): it also runs
    /// the fleet's scheduler and the scheduled jobs (reconcile, push-channel
    /// upkeep, retention).
    pub fn fleet_worker_state(&self, opts: &WorkerOptions) -> Arc<WorkerState> {
        let mut state = self.state(opts);
        state.schedule = Some(ScheduleSettings {
            reconcile: self.cfg.reconcile.clone(),
            channels_every: self.cfg.drive_channels_every,
            upkeep: UpkeepSettings {
                public_url: self.cfg.public_url.clone(),
                retention: self.cfg.retention.clone(),
            },
        });
        Arc::new(state)
    }
}
