"""Authentication, shared by the AMQP side ($cbs, SASL) and the admin port, importing neither:
shared access signatures (sas.py: parsing, signing, checking tokens), the namespace's SAS rules
and their rights (sasrules.py), and the log of refused requests (rejections.py)."""
