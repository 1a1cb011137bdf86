//! A delivery read back for processing.
//!
//! The delivery table holds nothing but deliveries the gateway verified at
//! receipt, so a delivery read from it may be parsed as authentic. That
//! promise is carried by [`StoredDelivery`]: its fields are private and only
//! [`Store::stored_delivery`] makes one, so bytes from anywhere else cannot
//! pass for a stored delivery (the gateway's `Verified` stays the type of a
//! delivery checked on arrival, and nothing else constructs it).

use cmcp_domain::Platform;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::Store;
use super::webhooks::{DeliveryRow, DeliveryStatus};
use crate::error::Result;

/// A verified delivery as the store kept it: the headers that matter for
/// parsing (never an auth header) and the raw body.
#[derive(Clone)]
pub struct StoredDelivery {
    id: String,
    connection_id: String,
    platform: Platform,
    event: String,
    status: DeliveryStatus,
    headers: HeaderMap,
    body: Vec<u8>,
    received_at: i64,
    attempts: i64,
}

impl StoredDelivery {
    fn from_row(row: DeliveryRow) -> StoredDelivery {
        StoredDelivery {
            headers: header_map(&row.headers),
            id: row.id,
            connection_id: row.connection_id,
            platform: row.platform,
            event: row.event,
            status: row.status,
            body: row.body,
            received_at: row.received_at,
            attempts: row.attempts,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn connection_id(&self) -> &str {
        &self.connection_id
    }

    /// The platform of the route it arrived on.
    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// The label the gateway gave it (`repository.renamed`).
    pub fn event(&self) -> &str {
        &self.event
    }

    pub fn status(&self) -> DeliveryStatus {
        self.status
    }

    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// When the gateway stored it (epoch ms): retries end a horizon after.
    pub fn received_at(&self) -> i64 {
        self.received_at
    }

    /// Failed attempts so far (each one retried).
    pub fn attempts(&self) -> i64 {
        self.attempts
    }

    /// The raw body, byte for byte as signed.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// The body shows as its length: it can be megabytes.
impl std::fmt::Debug for StoredDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredDelivery")
            .field("id", &self.id)
            .field("connection_id", &self.connection_id)
            .field("platform", &self.platform)
            .field("event", &self.event)
            .field("status", &self.status)
            .field("body_bytes", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// Stored header pairs as a header map; a pair that is not a valid header
/// (it could not have been received as one) is dropped.
fn header_map(pairs: &[(String, String)]) -> HeaderMap {
    pairs
        .iter()
        .filter_map(|(k, v)| {
            Some((
                HeaderName::from_bytes(k.as_bytes()).ok()?,
                HeaderValue::from_str(v).ok()?,
            ))
        })
        .collect()
}

impl Store {
    /// One delivery, read back to be processed.
    pub async fn stored_delivery(&self, id: &str) -> Result<StoredDelivery> {
        self.get_delivery(id).await.map(StoredDelivery::from_row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_headers_become_a_header_map() {
        let pairs = vec![
            ("x-github-event".to_owned(), "repository".to_owned()),
            ("bad header".to_owned(), "x".to_owned()),
        ];
        let map = header_map(&pairs);
        assert_eq!(map.len(), 1);
        assert_eq!(map["x-github-event"], "repository");
    }
}
