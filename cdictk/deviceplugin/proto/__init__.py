"""The device plugin API (v1beta1): deviceplugin.proto, written by us from the published API, and the
code generated from it (``deviceplugin_pb2``: the messages; ``deviceplugin_pb2_grpc``: the servicer
base class, the stubs), with typed stubs (``.pyi``) for mypy. ``make proto`` generates it again."""
