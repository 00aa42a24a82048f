"""The surfaces: translate a framework's shapes in, call a strategy, translate the result out.

* :mod:`~langmem_ext.integrations.graph`: ``MemoryNode`` for LangGraph (``pre_model_hook``);
* :mod:`~langmem_ext.integrations.agents`: ``MemoryMiddleware`` for ``create_agent`` (needs the
  ``agents`` extra, so it is not imported here);
* :mod:`~langmem_ext.integrations.history`: ``ManagedChatMessageHistory`` for
  ``RunnableWithMessageHistory``, with its per-key write locks in
  :mod:`~langmem_ext.integrations.locks`;
* :mod:`~langmem_ext.integrations.legacy`: the drop-in ``ConversationSummaryBufferMemory``
  (imported by users as :mod:`langmem_ext.compat`), with its state and pruning plan in
  :mod:`~langmem_ext.integrations.legacy_state`;
* ``_store``: the store flows (one generator of steps per operation, a sync and an async driver)
  and the ``StateStore`` adapter the surfaces share.

No policy lives here: what to keep, clip, fold or drop is decided by the plans in
:mod:`langmem_ext.core`.
"""
