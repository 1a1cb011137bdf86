//! Push channels: `changes.watch` opens one, `channels.stop` ends one.
//!
//! Drive notifications carry no signature; the channel id and token the
//! caller chooses here, and the resource id Drive answers with, are what
//! authenticates them later, so the caller stores all three (the token
//! sealed). Both calls accept read-only scopes. They are POSTs and rare (one
//! per drive per renewal), so each is one attempt, not retried, through the
//! connector's executor: it waits for and spends the fleet's budget like a
//! read, and a failure comes back classified like any Drive answer; the
//! caller tries again at its next pass. The channel token never appears in
//! an error or a log.

use cmcp_domain::Token;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{DriveConnector, PLATFORM};
use crate::common::policy::Counters;
use crate::error::{ConnectorError, Result};
use crate::feed::{FeedPosition, OpenedChannel, PushChannels};

/// A channel Drive accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedChannel {
    pub id: String,
    /// Drive's id for the watched resource; needed to stop the channel and
    /// to authenticate its notifications.
    pub resource_id: String,
    pub resource_uri: Option<String>,
    /// When Drive stops sending, epoch ms (Drive may shorten what was
    /// asked: `changes.watch` channels live at most a week).
    pub expiration: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChannelAnswer {
    id: String,
    resource_id: String,
    #[serde(default)]
    resource_uri: Option<String>,
    /// `int64` in Google's JSON: a string (a number is accepted too).
    #[serde(default)]
    expiration: Option<Value>,
}

impl DriveConnector {
    /// `changes.watch` from `page_token` on one shared drive (or the
    /// user's corpus when `drive_id` is `None`), delivering to `address`.
    pub async fn watch_changes(
        &self,
        drive_id: Option<&str>,
        page_token: &str,
        address: &str,
        channel_id: &str,
        token: &Token,
        expiration_ms: i64,
    ) -> Result<WatchedChannel> {
        let mut url = self.drive_v3(&["changes", "watch"]);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("pageToken", page_token);
            if let Some(d) = drive_id {
                q.append_pair("driveId", d)
                    .append_pair("supportsAllDrives", "true")
                    .append_pair("includeItemsFromAllDrives", "true");
            }
        }
        let body = json!({
            "id": channel_id,
            "type": "web_hook",
            "address": address,
            "token": token.expose(),
            "expiration": expiration_ms.to_string(),
        });
        let bytes = self.post(&url, &body).await?;
        let answer: ChannelAnswer =
            serde_json::from_slice(&bytes).map_err(|e| ConnectorError::Decode {
                platform: PLATFORM,
                detail: format!("changes.watch answer: {e}"),
            })?;
        let expiration = answer
            .expiration
            .as_ref()
            .and_then(|v| match v {
                Value::String(s) => s.parse().ok(),
                Value::Number(n) => n.as_i64(),
                _ => None,
            })
            .ok_or_else(|| ConnectorError::Decode {
                platform: PLATFORM,
                detail: "changes.watch answer has no expiration".into(),
            })?;
        if answer.id != channel_id {
            return Err(ConnectorError::Decode {
                platform: PLATFORM,
                detail: "changes.watch answered for another channel id".into(),
            });
        }
        Ok(WatchedChannel {
            id: answer.id,
            resource_id: answer.resource_id,
            resource_uri: answer.resource_uri,
            expiration,
        })
    }

    /// `channels.stop`: Drive stops sending to the channel.
    pub async fn stop_channel(&self, channel_id: &str, resource_id: &str) -> Result<()> {
        let url = self.drive_v3(&["channels", "stop"]);
        self.post(&url, &json!({"id": channel_id, "resourceId": resource_id}))
            .await?;
        Ok(())
    }

    /// One JSON POST through the connector's executor, so the call waits
    /// for and spends the fleet's budget like every read.
    async fn post(&self, url: &url::Url, body: &Value) -> Result<Vec<u8>> {
        let bytes = serde_json::to_vec(body).map_err(|e| ConnectorError::InvalidConfig {
            detail: format!("cannot encode a channel request: {e}"),
        })?;
        self.client
            .post_json(url, &bytes, &Counters::default())
            .await
    }
}

/// `changes.watch` channels, one per shared drive's feed.
#[async_trait::async_trait]
impl PushChannels for DriveConnector {
    async fn open(
        &self,
        position: &FeedPosition,
        address: &str,
        channel_id: &str,
        token: &Token,
        expiration_ms: i64,
    ) -> Result<OpenedChannel> {
        let w = self
            .watch_changes(
                Some(&position.feed),
                &position.token,
                address,
                channel_id,
                token,
                expiration_ms,
            )
            .await?;
        Ok(OpenedChannel {
            id: w.id,
            resource_id: w.resource_id,
            expiration: w.expiration,
        })
    }

    async fn stop(&self, channel_id: &str, resource_id: &str) -> Result<()> {
        self.stop_channel(channel_id, resource_id).await
    }
}
