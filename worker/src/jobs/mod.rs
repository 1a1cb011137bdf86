pub mod sync_connection;
