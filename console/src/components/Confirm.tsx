import { useState } from "preact/hooks";

/**
 * A button that asks once more inline before a destructive action (no modal
 * dialogs: they block tests and screen readers alike).
 */
export function ConfirmButton(props: {
  label: string;
  confirmLabel: string;
  onConfirm: () => void | Promise<void>;
  disabled?: boolean;
  testid?: string;
}) {
  const [armed, setArmed] = useState(false);
  if (!armed)
    return (
      <button class="secondary outline small" disabled={props.disabled} data-testid={props.testid} onClick={() => setArmed(true)}>
        {props.label}
      </button>
    );
  return (
    <span class="confirm">
      <button
        class="contrast small"
        disabled={props.disabled}
        data-testid={props.testid ? `${props.testid}-confirm` : undefined}
        onClick={async () => {
          setArmed(false);
          await props.onConfirm();
        }}
      >
        {props.confirmLabel}
      </button>
      <button class="secondary outline small" onClick={() => setArmed(false)}>
        Cancel
      </button>
    </span>
  );
}
