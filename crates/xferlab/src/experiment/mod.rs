pub mod db;
pub mod store;
