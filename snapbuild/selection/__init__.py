"""The selector's parts, each judged or ranked apart; :mod:`snapbuild.selection.selector` puts them
together.

- :mod:`.hardware`: the typed hardware tables (bandwidths, accelerator classes, vendor names);
- :mod:`.tables`: every table a selection reads, as one argument (the packaged ones by default);
- :mod:`.verdicts`: how one engine's verdicts are collected and worded;
- :mod:`.devices`: which GPU, NPU or CPU an engine would run on;
- :mod:`.conditions`: the manifest's written conditions (CPU flags, levels, any-of);
- :mod:`.memory_fit`: whether the model fits that device's memory, at which context;
- :mod:`.judging`: every verdict for one engine, and its estimated speed;
- :mod:`.ranking`: the ordered criteria from which precedence, sort key and ``why`` all come.
"""
