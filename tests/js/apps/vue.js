import { createApp, defineComponent, h, onMounted, onUpdated, watch } from "vue";
import { useReplay } from "replay-client/vue";
import { connect, expose, mounted, rendered, sessionId } from "./harness.js";

const Chat = defineComponent({
  props: { sessionId: { type: String, required: true } },
  setup(props) {
    const { client, view } = useReplay(() => ({ baseUrl: location.origin, sessionId: props.sessionId }), connect);
    watch(client, expose);
    onMounted(mounted);
    onUpdated(rendered);
    return () => {
      const v = view.value;
      if (v === null) return h("p", { id: "status" }, "connecting");
      return h("div", [
        h("p", { id: "status" }, v.status.state),
        h(
          "ul",
          { id: "items" },
          v.items.map((item, i) =>
            h("li", { key: i }, item.kind === "message" ? `${item.role}: ${item.text}` : item.kind),
          ),
        ),
        v.live ? h("p", { id: "live" }, v.live.text) : null,
      ]);
    };
  },
});

const app = createApp(Chat, { sessionId });
app.mount("#app");
window.t.unmount = () => app.unmount();
