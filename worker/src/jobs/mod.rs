pub mod handle_delivery;
pub mod sync_connection;
