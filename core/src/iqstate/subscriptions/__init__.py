"""Change subscriptions (SPEC 12): follow a store's committed batches instead of polling.

`Application.subscribe` opens a `Subscription` (`subscription.py`) over the feeds the hosted
partitions publish to (`feed.py`); the public names are exported by `iqstate`. This
package's own `__init__` imports nothing, so the runtime can import the feed without
importing the subscriptions that build on the runtime.
"""
