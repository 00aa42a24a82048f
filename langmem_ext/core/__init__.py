"""The pure core: tokens, messages, identity, state and the two plans (cutting and folding).

Nothing here does I/O, reads a clock, calls a model or imports LangGraph: a plan is a generator
that takes messages, state, configuration and counts and yields what it needs (a fold request)
or returns what the model sees. The strategies (:mod:`langmem_ext.strategies`) drive it; the
integrations (:mod:`langmem_ext.integrations`) translate LangGraph, LangChain and stored
histories in and out. See ``docs/architecture.md``.
"""
