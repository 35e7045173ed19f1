//! Names of custom ops for the text form: `%o = custom "tear" %x {dims = [1]}` finds the
//! factory registered under "tear" and builds the op from the attributes.

use super::{CustomOpRef, OpParams};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

/// Builds a custom op from the attributes written in the text form.
pub type CustomOpFactory = Arc<dyn Fn(&OpParams) -> Result<CustomOpRef, String> + Send + Sync>;

fn registry() -> &'static RwLock<HashMap<String, CustomOpFactory>> {
    static R: OnceLock<RwLock<HashMap<String, CustomOpFactory>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

/// Registers `factory` under `name`, replacing an earlier registration of that name.
pub fn register_custom_op(
    name: &str,
    factory: impl Fn(&OpParams) -> Result<CustomOpRef, String> + Send + Sync + 'static,
) {
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string(), Arc::new(factory));
}

/// The op registered under `name`, built from `params`.
pub fn lookup_custom_op(name: &str, params: &OpParams) -> Result<CustomOpRef, String> {
    let f = registry()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .cloned()
        .ok_or_else(|| format!("no custom op named \"{name}\" is registered"))?;
    f(params)
}
