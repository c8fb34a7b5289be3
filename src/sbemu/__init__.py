"""sbemu: a local emulator of Azure Service Bus with partitioned entities."""

__version__ = "0.1.0"
