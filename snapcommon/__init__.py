"""What every layer of the project shares, and nothing else: the error base, the kebab-case
document models and the plain-dataclass mixin.

It is the bottom of the layer order (``snapcommon`` <- ``hwprobe`` <- ``runtimes`` <- ``snapbuild``
<- ``snaps``) and imports nothing of ours, so any layer may use it without pointing upwards.
"""
