//! Headless mode. SKELETON.
