"""Shared test configuration: hypothesis profiles (`--hypothesis-profile=long` for long runs)."""

from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None)
settings.register_profile(
    "long", max_examples=2_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("default")
