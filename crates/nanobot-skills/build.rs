//! Rebuild when the embedded built-in skills change (include_dir does not track new files on stable).
fn main() {
    println!("cargo:rerun-if-changed=skills");
}
