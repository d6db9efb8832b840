"""The AWS cloud provider (the only package that imports aiobotocore/botocore).

Modules: ``session`` (clients), ``errors`` (error-code classes), ``pricing``, ``instancetypes`` (catalogue,
allocatable, ICE cache), ``nodeclass`` (EC2NodeClass resolution), ``userdata`` (AL2023 nodeadm),
``launchtemplates``, ``instances`` (launch choices), ``cloudprovider`` (:class:`AWSCloudProvider`), ``messages``
(EventBridge interruption events, pure) and ``sqs`` (the interruption queue).
"""
