"""A "url" variable (cache-redis_url): validated by scheme, and masked only where it carries
credentials, in get_config's display and in admin.sql's view of the variable tables alike."""

from __future__ import annotations

import pytest

from gateway.admin_sql import AdminSQL
from gateway.assembly import declared_variables, open_store
from gateway.errors import ConfigError
from gateway.variables import MASK, mask_url

PASSWORD = "pw-of-redis-123"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://:{PASSWORD}@10.0.0.5:6379/2", f"redis://:{MASK}@10.0.0.5:6379/2"),
        (f"rediss://cache:{PASSWORD}@redis.internal/0", f"rediss://cache:{MASK}@redis.internal/0"),
        (f"redis://{PASSWORD}@host", f"redis://{MASK}@host"),
        (f"redis://host:6379/0?password={PASSWORD}&ssl=1", f"redis://host:6379/0?password={MASK}&ssl=1"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("", ""),
    ],
)
def test_the_display_masks_credentials_only(url: str, shown: str) -> None:
    declaration = declared_variables()["cache-redis_url"]
    assert declaration.display(url) == shown == mask_url(url)
    assert PASSWORD not in declaration.display(url)


def test_only_redis_urls_are_accepted() -> None:
    declaration = declared_variables()["cache-redis_url"]
    assert declaration.parse("unix:///run/redis.sock?db=3") == "unix:///run/redis.sock?db=3"
    for bad in ("127.0.0.1:6379", "http://redis:6379", "redis:/x"):
        with pytest.raises(ConfigError, match="cache-redis_url"):
            declaration.parse(bad)


def test_admin_sql_masks_a_url_that_carries_a_password(tmp_path) -> None:
    store = open_store(tmp_path / "data")
    store.initialize()
    admin = AdminSQL(store)
    query = "SELECT variable_value FROM global_variables WHERE variable_name = 'cache-redis_url'"
    store.set_variable("cache-redis_url", "redis://127.0.0.1:6379/4")
    assert admin.execute(query)["rows"] == [["redis://127.0.0.1:6379/4"]]  # nothing secret: shown
    store.set_variable("cache-redis_url", f"redis://:{PASSWORD}@127.0.0.1:6379/4")
    assert admin.execute(query)["rows"] == [[MASK]]
    assert PASSWORD not in repr(admin.execute("SELECT * FROM global_variables"))
