"""Token counters beyond the core's: provider-exact counts and the tiktoken seeder.

* :mod:`~langmem_ext.counting.providers`: ``AnthropicCounter`` (the provider's count endpoint,
  cached) and ``CalibratedCounter`` (a local count scaled by what a provider reported);
* :mod:`~langmem_ext.counting.seeding`: ``langmem-ext seed-tiktoken``, tiktoken's encoding files
  for offline machines (one file that imports nothing else from this package).

The counting protocol and the local counters are in :mod:`langmem_ext.core.tokens`; this package
imports only the core.
"""

from langmem_ext.counting.providers import AnthropicCounter, CalibratedCounter

__all__ = ["AnthropicCounter", "CalibratedCounter"]
