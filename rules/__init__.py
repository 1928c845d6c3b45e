"""The rules: one detector per module, ``tlNNN_<name>.py``.

``CATALOG`` lists every rule's code, its module and whether it is enabled by
default, so that a selection (``--select TL2``) can be resolved, and a run
whose results are all cached can finish, without importing any rule (and
LibCST).  ``tests/test_registry.py`` checks it against the rule classes.
"""

CATALOG = {
    # code: (module, enabled by default)
    "TL001": ("tl001_unused_noqa", False),
    "TL101": ("tl101_item_in_loop", True),
    "TL102": ("tl102_host_copy_in_loop", True),
    "TL103": ("tl103_synchronize_in_loop", True),
    "TL201": ("tl201_create_then_move", True),
    "TL202": ("tl202_dataloader_pin_memory", True),
    "TL203": ("tl203_dataloader_num_workers", True),
    "TL204": ("tl204_copy_without_non_blocking", True),
    "TL301": ("tl301_zero_grad_set_to_none", True),
    "TL302": ("tl302_eval_without_no_grad", True),
    "TL303": ("tl303_loss_graph_retained", True),
    "TL401": ("tl401_conv_bias_before_batchnorm", True),
    "TL402": ("tl402_manual_attention", True),
    "TL501": ("tl501_cudnn_benchmark_disabled", False),
    "TL502": ("tl502_deterministic_algorithms", False),
    "TL503": ("tl503_fp32_matmul_precision", False),
    "TL504": ("tl504_no_autocast", False),
    "TL505": ("tl505_no_compile", False),
    "TL506": ("tl506_tensor_core_alignment", False),
    "TL507": ("tl507_profiler_left_on", False),
    "TL601": ("tl601_data_parallel", True),
    "TL602": ("tl602_ddp_accumulation_without_no_sync", True),
    "TL603": ("tl603_ddp_find_unused_parameters", True),
    "TL701": ("tl701_anomaly_detection_enabled", True),
    "TL702": ("tl702_empty_cache_in_loop", True),
}
