//! Capabilities some platforms have beyond listing and reading by id: a
//! feed of what changed since a stored position, and push channels that
//! must be opened and renewed on the platform (where others have webhooks
//! configured once). A connector offers them through
//! [`Connector::change_feed`](crate::Connector::change_feed) and
//! [`Connector::push_channels`](crate::Connector::push_channels), so the
//! worker runs incremental passes and channel upkeep without naming a
//! platform. Drive has both today.

use cmcp_domain::{SpaceAddress, SpaceRecord, Token};

use crate::{HttpFigures, Result};

/// Where one feed of a connection stands (Drive: a shared drive and its
/// page token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPosition {
    pub feed: String,
    pub token: String,
}

/// One space a feed reported changed, re-read by id: a feed entry is never
/// trusted for the space's state. `suspicious` marks entries the feed
/// called removed or trashed, which may only mean lost access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedEntry {
    /// Readable and within what the catalogue lists.
    Current {
        record: SpaceRecord,
        suspicious: bool,
    },
    /// The direct read says it no longer exists.
    Gone(SpaceAddress),
    /// Readable, but outside what the catalogue lists (deeper than the
    /// configured depth, or no longer in a shared drive).
    OutOfScope {
        address: SpaceAddress,
        suspicious: bool,
    },
}

/// What one feed said since its position.
#[derive(Debug, Clone)]
pub struct FeedBatch {
    /// One entry per changed space (repeats collapsed to the latest).
    pub entries: Vec<FeedEntry>,
    /// Feed entries read, before collapsing repeats.
    pub read: u64,
    /// Entries about nothing the catalogue holds (files, the feed's own
    /// container, entries without an id).
    pub skipped: u64,
    /// Where the next pass starts; store it only once the entries are
    /// applied.
    pub next: String,
    pub figures: HttpFigures,
}

#[async_trait::async_trait]
pub trait ChangeFeed: Send + Sync {
    /// Where every feed starts now. Read before a full listing, so nothing
    /// that changes during it is skipped. A feed whose position cannot be
    /// read is left out: it waits for the next full sync.
    async fn start_positions(&self) -> Result<Vec<FeedPosition>>;

    /// Every change of one feed since `position`, each space re-read.
    async fn changes_since(&self, position: &FeedPosition) -> Result<FeedBatch>;

    /// Re-read one space by id: a rename or move changes the path of
    /// everything below it, which the feed does not report.
    async fn reread(&self, address: &SpaceAddress) -> Result<FeedEntry>;
}

/// A channel the platform accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedChannel {
    pub id: String,
    /// The platform's id of the watched resource: needed to stop the
    /// channel and to authenticate its notifications.
    pub resource_id: String,
    /// When the platform stops sending, epoch ms (it may shorten what was
    /// asked).
    pub expiration: i64,
}

#[async_trait::async_trait]
pub trait PushChannels: Send + Sync {
    /// Ask the platform to notify `address` of changes to one feed from
    /// `position`, under the caller's channel id and secret token.
    async fn open(
        &self,
        position: &FeedPosition,
        address: &str,
        channel_id: &str,
        token: &Token,
        expiration_ms: i64,
    ) -> Result<OpenedChannel>;

    /// The platform stops sending to the channel.
    async fn stop(&self, channel_id: &str, resource_id: &str) -> Result<()>;
}
