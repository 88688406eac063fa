/**
 * The order workflow's search attributes (registered on the dev server by
 * src/devserver/temporal.ts). Shared by the workflow, which sets them, and
 * the operator tools and metrics, which query Temporal visibility by them.
 * Pure: imported by workflow code.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const OrderStatusKey = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);
export const TenantIdKey = defineSearchAttributeKey('TenantId', SearchAttributeType.KEYWORD);
export const OrderLastErrorKey = defineSearchAttributeKey('OrderLastError', SearchAttributeType.TEXT);
