//! Push channels: keep one live channel per change feed of a connection
//! whose connector offers [`Connector::push_channels`] (Drive's
//! `changes.watch`), so that the gateway has something to authenticate its
//! notifications against.
//!
//! Channels expire silently (at most a week for Drive) and are never renewed
//! by the platform (trap 6 of the upstream notes), so [`ensure_channels`]
//! runs periodically (a scheduled job per connection, see `schedule.rs`), well
//! inside the renewal margin. One pass, per feed that has a position:
//!
//! - no channel: open one, with a random channel id and a random token
//!   (the token is the secret; it is sealed in the store and never logged);
//! - a live channel expiring within the margin: open the new channel first,
//!   record it, and only then stop the old one, so there is no gap;
//! - a channel that expired without renewal (lapsed): open a new one, mark
//!   the old one stopped, and afterwards run one incremental pass
//!   ([`crate::change_feed::run_incremental`]) so that changes made while
//!   nobody was listening are not lost;
//! - older duplicates (a pass that died between opening and stopping) and
//!   channels of feeds without a position are stopped.
//!
//! Feeds come from the stored change-feed positions, which the full sync
//! records: a feed without a position cannot be read incrementally, so a
//! notification for it would be of no use. A channel starts from the feed's
//! stored position. Two passes running at once may open two channels for a
//! feed; the next pass stops the older one.

use std::collections::BTreeMap;
use std::time::Duration;

use cmcp_connectors::feed::{FeedPosition, PushChannels};
use cmcp_domain::{Platform, Token};
use cmcp_registry::{DriveChannelRow, NewDriveChannel};
use tracing::{info, instrument, warn};

use crate::change_feed::{IncrementalOutcome, run_incremental};
use crate::error::{Result, WorkerError};
use crate::sync::SyncContext;

/// How long channels are asked to live and when they are renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelPolicy {
    /// Asked of the platform (Drive caps `changes.watch` at a week).
    pub lifetime: Duration,
    /// A channel expiring within this is renewed.
    pub renew_margin: Duration,
}

impl Default for ChannelPolicy {
    fn default() -> Self {
        ChannelPolicy {
            lifetime: Duration::from_secs(7 * 24 * 3600),
            renew_margin: Duration::from_secs(24 * 3600),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default)]
pub struct ChannelReport {
    /// Feeds that had no channel and got one.
    pub opened: u64,
    /// Live channels replaced before they expired.
    pub renewed: u64,
    /// Channels that had expired unrenewed and were replaced.
    pub lapsed: u64,
    /// Live channels left as they were.
    pub kept: u64,
    /// Channels stopped (renewed, duplicates, feeds without a position).
    pub stopped: u64,
    /// Channels that could not be opened or stopped this pass.
    pub failed: u64,
    /// The incremental pass run because a channel had lapsed.
    pub incremental: Option<IncrementalOutcome>,
}

/// The hook URL the platform is told to notify for a connection: the
/// gateway's route for it.
pub fn hook_address(public_url: &str, platform: Platform, connection_id: &str) -> String {
    format!(
        "{}/hooks/{platform}/{connection_id}",
        public_url.trim_end_matches('/')
    )
}

/// [`ensure_channels_at`] now, with the default policy.
pub async fn ensure_channels(
    ctx: &SyncContext,
    connection_id: &str,
    public_url: &str,
) -> Result<ChannelReport> {
    ensure_channels_at(
        ctx,
        connection_id,
        public_url,
        &ChannelPolicy::default(),
        chrono::Utc::now().timestamp_millis(),
    )
    .await
}

fn random_channel_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn random_token() -> Token {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    Token::new(hex::encode(bytes))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One pass as if the time were `now_ms` (see the module docs).
#[instrument(skip_all, fields(connection_id = %connection_id))]
pub async fn ensure_channels_at(
    ctx: &SyncContext,
    connection_id: &str,
    public_url: &str,
    policy: &ChannelPolicy,
    now_ms: i64,
) -> Result<ChannelReport> {
    let connection = ctx.store.get_connection(connection_id).await?;
    let connector =
        crate::budget::connector(&ctx.store, &ctx.cipher, &ctx.http, &connection).await??;
    let Some(push) = connector.push_channels() else {
        return Err(WorkerError::Sync {
            connection_id: connection.id.clone(),
            detail: format!("a {} connection has no push channels", connection.platform),
        });
    };
    let address = hook_address(public_url, connection.platform, connection_id);
    ensure_with(ctx, push, connection_id, &address, policy, now_ms).await
}

/// The pass itself, with the connector's channels and the hook address.
#[instrument(skip_all, fields(connection_id = %connection_id))]
async fn ensure_with(
    ctx: &SyncContext,
    push: &dyn PushChannels,
    connection_id: &str,
    address: &str,
    policy: &ChannelPolicy,
    now_ms: i64,
) -> Result<ChannelReport> {
    let positions = ctx.store.drive_page_tokens(connection_id).await?;
    let mut by_feed: BTreeMap<Option<String>, Vec<DriveChannelRow>> = BTreeMap::new();
    for row in ctx.store.unstopped_drive_channels(connection_id).await? {
        by_feed.entry(row.drive_id.clone()).or_default().push(row);
    }
    let mut report = ChannelReport::default();
    let margin = millis(policy.renew_margin);
    let opener = Opener {
        ctx,
        channels: push,
        connection_id,
        address,
        expiration: now_ms.saturating_add(millis(policy.lifetime)),
    };
    for p in &positions {
        let mut channels = by_feed
            .remove(&Some(p.drive_id.clone()))
            .unwrap_or_default();
        channels.sort_by_key(|c| std::cmp::Reverse(c.expiration));
        let newest = channels.first().cloned();
        let older: Vec<DriveChannelRow> = channels.into_iter().skip(1).collect();
        let to_stop = match newest {
            None => {
                if opener.open(&p.drive_id, &p.page_token).await {
                    report.opened += 1;
                } else {
                    report.failed += 1;
                }
                Vec::new()
            }
            Some(ch) if ch.expiration <= now_ms => {
                // Lapsed: the platform no longer sends; stopping it upstream would
                // only answer 404. Record it stopped once its successor is
                // open.
                if opener.open(&p.drive_id, &p.page_token).await {
                    report.lapsed += 1;
                    ctx.store
                        .stop_drive_channel(connection_id, &ch.channel_id)
                        .await?;
                    info!(feed = %p.drive_id, channel = %ch.channel_id, "push channel had lapsed; replaced");
                } else {
                    report.failed += 1;
                }
                Vec::new()
            }
            Some(ch) if ch.expiration - now_ms <= margin => {
                if opener.open(&p.drive_id, &p.page_token).await {
                    report.renewed += 1;
                    vec![ch]
                } else {
                    // The old one still runs until it expires; the next
                    // pass tries again.
                    report.failed += 1;
                    Vec::new()
                }
            }
            Some(_) => {
                report.kept += 1;
                Vec::new()
            }
        };
        for ch in to_stop.iter().chain(&older) {
            stop(ctx, push, connection_id, ch, now_ms, &mut report).await?;
        }
    }
    // Channels of feeds that no longer have a position.
    for ch in by_feed.into_values().flatten() {
        stop(ctx, push, connection_id, &ch, now_ms, &mut report).await?;
    }
    if report.lapsed > 0 {
        report.incremental = Some(run_incremental(ctx, connection_id).await?);
    }
    info!(
        opened = report.opened,
        renewed = report.renewed,
        lapsed = report.lapsed,
        kept = report.kept,
        stopped = report.stopped,
        failed = report.failed,
        "push channels ensured"
    );
    Ok(report)
}

struct Opener<'a> {
    ctx: &'a SyncContext,
    channels: &'a dyn PushChannels,
    connection_id: &'a str,
    address: &'a str,
    expiration: i64,
}

impl Opener<'_> {
    /// Opens and records a channel for one feed; whether it worked.
    async fn open(&self, feed: &str, page_token: &str) -> bool {
        let channel_id = random_channel_id();
        let token = random_token();
        let position = FeedPosition {
            feed: feed.to_owned(),
            token: page_token.to_owned(),
        };
        let watched = match self
            .channels
            .open(
                &position,
                self.address,
                &channel_id,
                &token,
                self.expiration,
            )
            .await
        {
            Ok(w) => w,
            Err(e) => {
                warn!(feed = %feed, error = %e, "could not open a push channel");
                return false;
            }
        };
        let new = NewDriveChannel {
            connection_id: self.connection_id,
            drive_id: Some(feed),
            channel_id: &watched.id,
            token: &token,
            resource_id: &watched.resource_id,
            expiration: watched.expiration,
        };
        match self
            .ctx
            .store
            .insert_drive_channel(&self.ctx.cipher, &new)
            .await
        {
            Ok(()) => {
                info!(feed = %feed, channel = %watched.id, expiration = watched.expiration, "push channel opened");
                true
            }
            Err(e) => {
                // Not recorded: its notifications would be refused, so stop
                // it rather than leave it sending.
                warn!(feed = %feed, channel = %watched.id, error = %e, "could not record a push channel; stopping it");
                if let Err(e) = self.channels.stop(&watched.id, &watched.resource_id).await {
                    warn!(channel = %watched.id, error = %e, "could not stop an unrecorded push channel; it expires on its own");
                }
                false
            }
        }
    }
}

/// Stops a channel upstream (when it may still be live there) and marks it
/// stopped. An upstream 404 means it is already gone.
async fn stop(
    ctx: &SyncContext,
    channels: &dyn PushChannels,
    connection_id: &str,
    ch: &DriveChannelRow,
    now_ms: i64,
    report: &mut ChannelReport,
) -> Result<()> {
    if ch.expiration > now_ms {
        match channels.stop(&ch.channel_id, &ch.resource_id).await {
            Ok(()) | Err(cmcp_connectors::ConnectorError::NotFound { .. }) => {}
            Err(e) => {
                warn!(channel = %ch.channel_id, error = %e, "could not stop a push channel; next pass retries");
                report.failed += 1;
                return Ok(());
            }
        }
    }
    ctx.store
        .stop_drive_channel(connection_id, &ch.channel_id)
        .await?;
    report.stopped += 1;
    Ok(())
}
