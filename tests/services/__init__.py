"""Real service processes for tests (PostgreSQL, SeaweedFS), started by session fixtures in tests/conftest.py."""
