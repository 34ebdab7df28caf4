//! Policies the lab can run by name (`engine.policy=NAME`): ext4's
//! (`kernel`, the default) and whatever a program registered before the
//! command line was read (`examples/first_fit.rs` registers `first-fit`
//! and then runs the `mballoc` command unchanged).

use mballoc::{KernelPolicy, Policy};
use std::sync::{Arc, OnceLock, RwLock};

fn registry() -> &'static RwLock<Vec<Arc<dyn Policy>>> {
    static R: OnceLock<RwLock<Vec<Arc<dyn Policy>>>> = OnceLock::new();
    R.get_or_init(|| RwLock::new(vec![Arc::new(KernelPolicy)]))
}

/// Make `policy` available as `engine.policy=NAME` (its [`Policy::name`]);
/// a policy of the same name is replaced.
pub fn register(policy: Arc<dyn Policy>) {
    let mut r = registry().write().unwrap_or_else(|e| e.into_inner());
    r.retain(|p| p.name() != policy.name());
    r.push(policy);
}

/// The policy registered as `name`.
pub fn find(name: &str) -> Option<Arc<dyn Policy>> {
    registry().read().unwrap_or_else(|e| e.into_inner()).iter().find(|p| p.name() == name).cloned()
}

/// Every registered name, `kernel` first.
pub fn names() -> Vec<String> {
    registry().read().unwrap_or_else(|e| e.into_inner()).iter().map(|p| p.name().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Nothing;
    impl Policy for Nothing {
        fn name(&self) -> &str {
            "registry-test"
        }
    }

    #[test]
    fn registered_policies_are_found_by_name() {
        assert!(find("kernel").is_some());
        assert!(find("registry-test").is_none());
        register(Arc::new(Nothing));
        assert_eq!(find("registry-test").unwrap().name(), "registry-test");
        assert!(names().contains(&"registry-test".to_string()));
    }
}
