"""Token counters: local, chat-model and provider-exact counts, and the tiktoken seeder.

* :mod:`~langmem_ext.counting.anthropic`: ``AnthropicCounter`` (the provider's count endpoint,
  cached);
* :mod:`~langmem_ext.counting.calibrated`: ``CalibratedCounter`` (a local count scaled by what a
  provider reported);
* :mod:`~langmem_ext.counting.seeding`: ``langmem-ext seed-tiktoken``, tiktoken's encoding files
  for offline machines (one file that imports nothing else from this package).

The counters that cache or load live here too (the pure core keeps only the
``TokenCounter`` protocol and ``checked_count``, :mod:`langmem_ext.core.tokens`):

* :mod:`~langmem_ext.counting.cache`: ``CachedCounter``, the base of every counter, and its
  locked count cache;
* :mod:`~langmem_ext.counting.local`: ``TiktokenCounter`` (loads tiktoken's encoding files) and
  ``ApproximateCounter``;
* :mod:`~langmem_ext.counting.chat_model`: ``ChatModelCounter`` (a chat model's own counting);
* :mod:`~langmem_ext.counting.resolve`: ``as_counter``, which turns a name, a model, a function
  or ``None`` into a counter.

This package imports only the core.
"""

from langmem_ext.counting.anthropic import AnthropicCounter
from langmem_ext.counting.calibrated import CalibratedCounter

__all__ = ["AnthropicCounter", "CalibratedCounter"]
