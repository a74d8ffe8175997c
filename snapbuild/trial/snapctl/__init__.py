"""A file-backed ``snapctl`` for running a snap's hooks and apps without snapd.

``snapbuild try`` writes an executable named ``snapctl`` that runs ``python -m
snapbuild.trial.snapctl`` and puts it first on PATH, so the in-snap code (:mod:`snaps.snapctl`)
calls it exactly as it calls snapd's. It keeps what snapd would keep in files under
``$SNAPCTL_STANDIN_STATE`` (:mod:`.state`):

- ``config.json``: the snap's configuration (:mod:`.config`; nested objects for dotted keys,
  like snapd);
- ``services.json``: each app's enabled flag and the pid of its supervisor (:mod:`.services`);
  services are started from ``$SNAP/meta/snap.yaml``'s ``apps:`` entry in their own session
  (process group), with output in ``logs/<app>.log``, and stopped by signalling that whole
  group. A small supervisor (:mod:`.supervisor`) honours ``restart-condition`` and
  ``restart-delay`` like systemd does for snapd, with systemd's default start limit, so a daemon
  that keeps failing is not restarted forever;
- ``connections.json``: which plugs are connected (absent plugs count as connected, as when an
  operator has run ``snap connect``; tests write ``false`` to simulate a missing connection).

``install +<component>`` links ``$SNAPCTL_STANDIN_COMPONENTS/<component>`` (where the trial staged
the component's files) to ``$SNAP_COMPONENTS/<component>``, where snapd would mount it;
``remove +<component>`` takes the link away (:mod:`.commands`).

Inside a hook snapd does not do these at once. Its documentation: "If these commands are run from
a hook, the components will be installed/removed after the hook itself has run if it ended
successfully", and service commands from a hook are queued the same way. snapd knows it serves a
hook from the context behind ``$SNAP_COOKIE``; a file-backed stand-in has no such context, so
whoever runs a hook (``snapbuild try``, the tests) sets ``$SNAPCTL_STANDIN_HOOK`` to the hook's
name. While it is set, ``install``, ``remove``, ``start``, ``stop`` and ``restart`` are appended to
``queue.json``; after the hook the runner calls ``flush`` (exit 0: component changes first, then
service changes, in the order asked, as snapd's change does) or ``discard`` (the hook failed:
nothing queued happens). Outside a hook they happen at once, as ``snapctl install`` blocks there.

This package imports only the standard library and PyYAML: it starts for every snapctl call.
"""
