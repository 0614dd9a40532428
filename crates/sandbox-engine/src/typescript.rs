//! TEMPORARY
pub struct E;
impl std::fmt::Display for E { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("x") } }
impl E { pub fn message(&self) -> &str { "" } pub fn line(&self) -> Option<u32> { None } pub fn column(&self) -> Option<u32> { None } }
pub fn transpile(s: &str, _f: &str) -> Result<String, E> { Ok(s.to_owned()) }
