pub mod handle_delivery;
pub mod scheduled;
pub mod sync_connection;
