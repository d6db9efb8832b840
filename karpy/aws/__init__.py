"""The AWS cloud provider (the only package that imports aiobotocore/botocore), one module per AWS noun as
Karpenter AWS's ``pkg/providers``.

Facade: ``cloudprovider`` (:class:`~karpy.aws.cloudprovider.AWSCloudProvider`, Karpenter ``pkg/cloudprovider``).
Providers: ``instances`` (CreateFleet, Describe/TerminateInstances), ``instancetypes`` (catalogue, allocatable),
``pricing``, ``launchtemplates``, ``subnets``, ``securitygroups``, ``amis``, ``instanceprofiles``, ``nodeclass``
(EC2NodeClass status from the four before), ``sqs`` (the interruption queue). Pure helpers: ``cache`` (every
TTL and the ICE cache), ``errors`` (error-code classes), ``requirements`` and ``instancefilters`` (launch
choices), ``selectors`` (selector terms → EC2 filters), ``userdata`` (AL2023 nodeadm), ``messages``
(EventBridge interruption events). ``session`` opens the clients.
"""
