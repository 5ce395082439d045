"""elk_coordinator's deployments: taking one over (import, adoption) and giving it back (export)."""
