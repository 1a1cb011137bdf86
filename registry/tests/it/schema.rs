//! The schema itself: migrations are idempotent, and both backends have
//! the same tables and columns.

use cmcp_registry::testing::TestDb;

both_backends!(migrations_are_idempotent,);

async fn migrations_are_idempotent(db: TestDb) {
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.ping().await.unwrap();
}
