fn main() {
    // sqlx::migrate! embeds the SQL at compile time; rebuild when it changes.
    println!("cargo:rerun-if-changed=../migrations");
}
