"""`snapbuild try`'s machinery: a built snap's life on this machine without snapd.

Toolkit-only: the builder leaves this package out of the source it vendors into a snap
(:data:`snapbuild.project.render.TOOLKIT_ONLY`), because nothing an installed snap runs may depend
on a simulation of snapd. The trial drives the snap from outside, as snapd and a user would:
it runs the rendered hook scripts and the snap's command as subprocesses, and puts a file-backed
``snapctl`` (:mod:`snapbuild.trial.snapctl`) first on their PATH.

Modules: :mod:`~snapbuild.trial.sandbox` (the directories and variables of one trial),
:mod:`~snapbuild.trial.prime` (the prime tree snapcraft would build),
:mod:`~snapbuild.trial.stage` (the components the stand-in installs from),
:mod:`~snapbuild.trial.health` (waiting for the server) and :mod:`~snapbuild.trial.run` (the
whole trial). :mod:`~snapbuild.trial.snapd` runs a packed ``.snap`` as snapd runs it instead
(root only): mounted read-only in its own mount namespace, with snapd's environment and socket
policy and the real ``snapctl``. This file imports nothing, so the stand-in, started for every
``snapctl`` call, stays quick to start.
"""
