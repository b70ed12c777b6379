/* Request page: keeps the claim alive, shares drafts with every open page, and follows the request live.
 * The page works without this script; it only adds what needs no reload. Agent text goes through textContent. */
(function () {
  "use strict";
  var RH = window.ReviewHub;
  var page = document.getElementById("request-page");
  if (!RH || !page) return;

  var me = document.body.dataset.username || "";
  var form = document.getElementById("answer-form");
  var notices = document.getElementById("notices");
  var badge = document.getElementById("status-badge");
  var holderText = document.getElementById("holder-text");
  var claimForm = document.getElementById("claim-form");
  var takeoverForm = document.getElementById("takeover-form");
  var flowStatus = document.getElementById("url-flow-status");
  var mine = page.dataset.mine === "true";
  var holder = page.dataset.holder || "";
  var status = page.dataset.status;
  var CLOSED = { completed: true, expired: true, withdrawn: true };
  var leaseSeconds = parseInt(page.dataset.leaseSeconds, 10) || 300;
  // A pending request nobody holds is a preview: its fields are open, and typing there claims it first.
  var preview = page.dataset.preview === "true" && !mine;
  var typed = false; // anything typed or chosen on this page: leaving then keeps the claim
  var submitting = false;
  var claiming = null;

  var CLOSED_LEVEL_OF = { answered: true, expired: true, withdrawn: true };

  /* --- notices and editability ---------------------------------------------------------------------------- */

  function notice(level, text) {
    // One live notice about the request's state at a time; server-rendered ones are replaced too.
    notices.querySelectorAll("[data-notice]").forEach(function (element) {
      if (element.dataset.notice !== "error" || CLOSED_LEVEL_OF[level]) element.remove();
    });
    var element = document.createElement("div");
    element.className = "alert alert-" + level;
    element.dataset.notice = level;
    element.textContent = text;
    notices.appendChild(element);
  }

  function clearStateNotices() {
    notices.querySelectorAll("[data-notice]").forEach(function (element) {
      if (element.dataset.notice === "info" || element.dataset.notice === "held") element.remove();
    });
  }

  function setEditable(editable) {
    if (form) {
      form.querySelectorAll("input, select, textarea, button").forEach(function (element) {
        if (element.name === "csrfmiddlewaretoken" || element.name === "then" || element.name === "inline") return;
        element.disabled = !editable && !(preview && element.dataset.answer !== "release");
      });
    }
    var open = document.getElementById("open-url");
    if (open) open.classList.toggle("is-hidden", !editable);
  }

  function show(element, visible) {
    if (element) element.classList.toggle("is-hidden", !visible);
    var dialog = element && !visible && element.querySelector("dialog[open]");
    if (dialog) dialog.close();
  }

  function setStatus(next) {
    status = next;
    page.dataset.status = next;
    badge.textContent = next;
    badge.className = "badge badge-lg badge-" + next;
  }

  function setHolder(text, who, since) {
    holderText.replaceChildren();
    if (!who) {
      holderText.textContent = text;
      return;
    }
    holderText.append("Held by ");
    var strong = document.createElement("strong");
    strong.textContent = who;
    holderText.append(strong, " since " + RH.clockTime(since) + ".");
  }

  var CLOSED_LEVEL = { completed: "answered", expired: "expired", withdrawn: "withdrawn" };

  function closedText(summary) {
    if (summary.status === "withdrawn") {
      return "The agent withdrew this request (its turn ended). Nothing entered here will be sent.";
    }
    if (summary.status === "expired") return "The deadline passed; the request expired.";
    return "This request was answered.";
  }

  function loseClaim(text) {
    mine = false;
    preview = false;
    page.dataset.mine = "false";
    setEditable(false);
    // A late reply (a draft save, a heartbeat) must not hide that the request is already gone.
    if (!CLOSED[status]) notice("warn", text);
  }

  /* --- live updates ------------------------------------------------------------------------------------------ */

  function applyUpdate(summary) {
    setStatus(summary.status);
    if (summary.url_flow_completed && flowStatus) show(flowStatus, true);
    if (summary.status !== "claimed") holder = "";
    if (CLOSED[summary.status]) {
      mine = false;
      setEditable(false);
      show(claimForm, false);
      show(takeoverForm, false);
      preview = false;
      setHolder("Closed.");
      notice(CLOSED_LEVEL[summary.status] || "info", closedText(summary));
      return;
    }
    if (summary.status === "claimed") {
      if (summary.claimed_by === me) {
        holder = me;
        mine = true;
        preview = false;
        page.dataset.mine = "true";
        setEditable(true);
        show(claimForm, false);
        show(takeoverForm, false);
        clearStateNotices();
        setHolder("You hold this request. Your claim renews while this page is open.");
        return;
      }
      if (mine) {
        loseClaim(summary.claimed_by + " took over this request. Your page is read-only now.");
      } else if (holder !== summary.claimed_by) {
        notice("held", summary.claimed_by + " is answering this request. Read-only.");
      }
      holder = summary.claimed_by;
      preview = false;
      setEditable(false);
      setHolder("", summary.claimed_by, summary.claimed_at);
      show(claimForm, false);
      show(takeoverForm, true);
      return;
    }
    // Back in the queue: the holder released it, or the lease ran out.
    if (mine) loseClaim("Your claim ran out and the request went back to the queue. Claim it again to answer.");
    else notice("info", "Nobody holds this request now. Claim it to answer.");
    setEditable(false);
    setHolder("Nobody holds this request.");
    show(claimForm, true);
    show(takeoverForm, false);
  }

  /* --- answers as values (the MCP content shape) -------------------------------------------------------------- */

  function answerInputs(question) {
    return question.querySelectorAll("[name^='answer-']");
  }

  function toContentDateTime(text) {
    var match = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(:\d{2}(?:\.\d+)?)?$/.exec(text);
    return match ? match[1] + "T" + match[2] + (match[3] || ":00") + "Z" : text;
  }

  function toLocalDateTime(value) {
    var moment = new Date(value);
    return isNaN(moment.getTime()) ? value : moment.toISOString().slice(0, 19);
  }

  function readValue(question) {
    var kind = question.dataset.kind;
    var inputs = Array.prototype.slice.call(answerInputs(question));
    if (kind === "boolean" && inputs[0].type === "radio") {
      var choice = inputs.filter(function (input) {
        return input.checked;
      })[0];
      return choice ? choice.value === "true" : null;
    }
    if (kind === "boolean") return inputs[0].checked;
    if (kind === "multi-select") {
      var chosen = inputs.filter(function (input) {
        return input.checked;
      });
      return chosen.length
        ? chosen.map(function (input) {
            return input.value;
          })
        : null;
    }
    if (kind === "single-select") {
      if (inputs[0].tagName.toLowerCase() === "select") return inputs[0].value || null;
      var picked = inputs.filter(function (input) {
        return input.checked;
      })[0];
      return picked ? picked.value : null;
    }
    var text = inputs[0].value;
    if (text === "") return null;
    if (kind === "number" || kind === "integer") {
      var number = Number(text);
      return isFinite(number) ? number : null;
    }
    return question.dataset.format === "date-time" ? toContentDateTime(text) : text;
  }

  function writeValue(question, value) {
    var kind = question.dataset.kind;
    var inputs = Array.prototype.slice.call(answerInputs(question));
    if (kind === "boolean" && inputs[0].type === "radio") {
      inputs.forEach(function (input) {
        input.checked = (input.value === "true" && value === true) || (input.value === "false" && value === false);
      });
    } else if (kind === "boolean") {
      inputs[0].checked = value === true;
    } else if (kind === "multi-select") {
      var values = Array.isArray(value) ? value : [];
      inputs.forEach(function (input) {
        input.checked = values.indexOf(input.value) !== -1;
      });
    } else if (kind === "single-select" && inputs[0].tagName.toLowerCase() !== "select") {
      inputs.forEach(function (input) {
        input.checked = input.value === value;
      });
    } else if (value === null || value === undefined) {
      inputs[0].value = "";
    } else {
      inputs[0].value = question.dataset.format === "date-time" ? toLocalDateTime(value) : String(value);
    }
  }

  function errorSentence(reason) {
    if (reason === "is required") return "This question is required.";
    var text = reason.charAt(0).toUpperCase() + reason.slice(1);
    return /\.$/.test(text) ? text : text + ".";
  }

  function showError(question, reason) {
    var element = question.querySelector("[data-error-for]");
    question.classList.toggle("has-error", Boolean(reason));
    if (!element) return;
    element.textContent = reason ? errorSentence(reason) : "";
    element.classList.toggle("is-hidden", !reason);
    answerInputs(question).forEach(function (input) {
      if (reason) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    });
  }

  /* --- shared drafts ------------------------------------------------------------------------------------------ */

  var draftsUrl = page.dataset.draftsUrl;

  /* Claim from the preview (the c key, the Claim button's script path, or the first keystroke in a field). */
  function claim() {
    if (mine) return Promise.resolve(true);
    if (claiming) return claiming;
    claiming = RH.post(page.dataset.claimUrl).then(function (result) {
      claiming = null;
      if (result.ok) {
        applyUpdate({ status: "claimed", claimed_by: me });
        return true;
      }
      var data = result.data || {};
      preview = false;
      if (data.status && CLOSED[data.status]) applyUpdate({ status: data.status });
      else loseClaim("Someone else claimed this request first. Your page is read-only.");
      return false;
    });
    return claiming;
  }

  function saveDraft(question, wanted) {
    if (!mine && preview) {
      claim().then(function (ok) {
        if (ok) saveDraft(question, wanted);
      });
      return;
    }
    if (!mine) return;
    var id = question.dataset.question;
    var value = readValue(question);
    var state = value === null ? "draft" : wanted;
    RH.post(draftsUrl, { question: id, value: value, state: state }).then(function (result) {
      if (result.status === 409) {
        var current = result.data && result.data.status;
        if (current && CLOSED[current]) applyUpdate({ status: current });
        else loseClaim("Your answer could not be saved: you no longer hold this request.");
      } else if (result.status === 400 && state === "submitted") {
        var fields = (result.data && result.data.fields) || {};
        showError(question, fields[id] || (result.data && result.data.detail) || "is not valid");
        // Still share what was typed, as a draft, so other pages see it.
        RH.post(draftsUrl, { question: id, value: value, state: "draft" });
      } else if (result.ok && state === "submitted") {
        showError(question, "");
      }
    });
  }

  function skipBox(question) {
    return question.querySelector("[data-skip-for]");
  }

  function applyDraft(draft) {
    if (draft.updated_by === me) return; // our own save coming back
    var question = form && form.querySelector('.question[data-question="' + CSS.escape(draft.question) + '"]');
    if (!question) return;
    var skipped = draft.state === "skipped";
    var box = skipBox(question);
    if (box) box.checked = skipped;
    question.classList.toggle("is-skipped", skipped);
    if (!skipped) writeValue(question, draft.value);
    var note = question.querySelector("[data-note-for]");
    if (note) note.textContent = (skipped ? "Skipped by " : "Edited by ") + (draft.updated_by || "someone");
    question.classList.remove("is-remote-edit");
    void question.offsetWidth; // restart the highlight animation
    question.classList.add("is-remote-edit");
  }

  // Draft saves wait a moment: a choice answered at once (y then a) sends only the answer, so no draft request
  // competes with it for the request's row. Sending the answer drops the saves still waiting.
  var draftTimers = [];
  var CHOICE_SAVE_MS = 250;

  function laterSave(question, state, delay) {
    var timer = window.setTimeout(function () {
      var at = draftTimers.indexOf(timer);
      if (at !== -1) draftTimers.splice(at, 1);
      saveDraft(question, state);
    }, delay);
    draftTimers.push(timer);
    return timer;
  }

  function dropWaitingSaves() {
    draftTimers.forEach(window.clearTimeout);
    draftTimers = [];
  }

  if (form) {
    form.querySelectorAll(".question[data-question]").forEach(function (question) {
      var timer = null;
      question.addEventListener("input", function (event) {
        typed = true;
        if (event.target.matches("[data-skip-for]")) return;
        window.clearTimeout(timer);
        timer = laterSave(question, "draft", 300);
      });
      question.addEventListener("change", function (event) {
        typed = true;
        window.clearTimeout(timer);
        if (event.target.matches("[data-skip-for]")) {
          var skipped = event.target.checked;
          question.classList.toggle("is-skipped", skipped);
          if (skipped) {
            showError(question, "");
            if (mine) RH.post(draftsUrl, { question: question.dataset.question, value: null, state: "skipped" });
          } else {
            saveDraft(question, "submitted");
          }
          return;
        }
        if (event.target.type === "radio" || event.target.type === "checkbox") {
          if (!mine && preview) claim(); // the claim is not delayed: a teammate must see it at once
          timer = laterSave(question, "submitted", CHOICE_SAVE_MS);
        } else {
          saveDraft(question, "submitted");
        }
      });
    });
  }

  /* --- claim heartbeat ---------------------------------------------------------------------------------------- */

  var heartbeatUrl = page.dataset.heartbeatUrl;

  function heartbeat() {
    if (!mine) return;
    RH.post(heartbeatUrl).then(function (result) {
      if (!mine || result.ok || result.status === 0) return; // status 0: offline for now, try again next beat
      var data = result.data || {};
      if (data.status && CLOSED[data.status]) {
        applyUpdate({ status: data.status });
      } else if (data.status === "claimed") {
        loseClaim("Someone else holds this request now. Your page is read-only.");
      } else {
        loseClaim("Your claim ran out and the request went back to the queue. Claim it again to answer.");
        show(claimForm, true);
      }
    });
  }

  // A third of the lease: two beats can be lost before the claim lapses.
  window.setInterval(heartbeat, Math.min(60000, Math.max(2000, (leaseSeconds * 1000) / 3)));
  // A tab that slept (laptop lid, background throttling) renews as soon as it is looked at again.
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") heartbeat();
  });

  /* --- socket and keys ---------------------------------------------------------------------------------------- */

  RH.socket(page.dataset.ws, {
    message: function (message) {
      if (message.type === "request.update" && message.request) applyUpdate(message.request);
      else if (message.type === "request.draft" && message.draft) applyDraft(message.draft);
    },
    open: function (again) {
      // Pushes may have been missed while disconnected; a read-only page can simply reload.
      if (again && !mine) window.location.reload();
    },
  });

  /* --- the keyboard loop ------------------------------------------------------------------------------------- */

  function yesNoQuestions() {
    if (!form) return [];
    return Array.prototype.slice.call(form.querySelectorAll('.question[data-kind="boolean"]')).filter(function (q) {
      return q.querySelector("input[type=radio]");
    });
  }

  /* y / n: answer the first yes/no question still open (or the only one), as a click on its radio would. */
  function chooseYesNo(yes) {
    var questions = yesNoQuestions();
    if (!questions.length) return false;
    var target =
      questions.filter(function (q) {
        return readValue(q) === null;
      })[0] || questions[0];
    var radio = target.querySelector('input[type=radio][value="' + (yes ? "true" : "false") + '"]');
    if (!radio || radio.disabled) return false;
    radio.click();
    return true;
  }

  /* Accept refuses while a required yes/no is unanswered: nothing is sent, the question says why and has focus. */
  function unansweredChoices() {
    return yesNoQuestions().filter(function (q) {
      return readValue(q) === null && !q.classList.contains("is-skipped");
    });
  }

  function clickAnswer(action) {
    var button = form && form.querySelector('[data-answer="' + action + '"]');
    if (!button || button.disabled) return;
    button.click();
  }

  if (form) {
    form.addEventListener("submit", function (event) {
      var submitter = event.submitter;
      if (submitter && submitter.value === "accept") {
        var missing = unansweredChoices();
        if (missing.length) {
          event.preventDefault();
          missing.forEach(function (q) {
            showError(q, "is required");
          });
          var first = missing[0].querySelector("input[type=radio]");
          if (first) first.focus();
          return;
        }
      }
      submitting = true;
      dropWaitingSaves();
    });
  }

  /* The answer's response may be the next request's page itself (inline=1, no redirect round trip): the address
   * bar then still shows the answered request's URL; put the page's own there, so reload and links are right. */
  if (page.dataset.url && location.pathname !== page.dataset.url) {
    history.replaceState(null, "", page.dataset.url);
  }

  var thenNext = document.getElementById("then-next");
  var inlineNext = document.getElementById("inline-next");
  function syncAutoNext() {
    if (thenNext) thenNext.value = RH.pref("autoNext") ? "next" : "";
    if (inlineNext) inlineNext.value = RH.pref("autoNext") && window.history.replaceState ? "1" : "";
  }
  syncAutoNext();
  document.addEventListener("reviewhub:prefs", syncAutoNext);

  if (claimForm) {
    claimForm.addEventListener("submit", function (event) {
      if (!preview) return; // not claimable from here: let the server say why
      event.preventDefault();
      claim();
    });
  }

  // Any form this page submits (answer, take over, next) is the reviewer acting, not leaving.
  document.addEventListener("submit", function (event) {
    if (!event.defaultPrevented) submitting = true;
  });

  /* Take over asks first, in a modal dialog: focus starts on Cancel, Escape or Cancel closes it and focus
   * returns to the trigger; only "Yes, take over" posts. */
  var takeoverDialog = document.getElementById("takeover-dialog");
  var takeoverOpen = document.getElementById("takeover-open");
  if (takeoverDialog && takeoverOpen && takeoverDialog.showModal) {
    takeoverOpen.addEventListener("click", function (event) {
      event.preventDefault();
      var name = document.getElementById("takeover-holder");
      if (name && holder) name.textContent = holder;
      if (takeoverDialog.open) takeoverDialog.close();
      takeoverDialog.showModal();
      document.getElementById("takeover-cancel").focus();
    });
    document.getElementById("takeover-cancel").addEventListener("click", function (event) {
      event.preventDefault();
      takeoverDialog.close();
    });
    takeoverDialog.addEventListener("close", function () {
      if (!takeoverForm.classList.contains("is-hidden")) takeoverOpen.focus();
    });
    if (takeoverDialog.open) {
      // Rendered open for ?takeover=1: make it modal like the trigger would.
      takeoverDialog.close();
      takeoverDialog.showModal();
    }
  }

  /* Leaving the page (navigation, tab closed) releases a claim on which nothing was typed. */
  window.addEventListener("pagehide", function () {
    if (!mine || typed || submitting || CLOSED[status] || !navigator.sendBeacon) return;
    var body = new FormData();
    body.append("csrfmiddlewaretoken", RH.csrfToken());
    navigator.sendBeacon(page.dataset.leaveUrl, body);
  });

  /* After a failed Accept, focus moves to the first field the error summary lists. */
  var summary = document.getElementById("error-summary");
  if (summary) {
    var firstInvalid = form && form.querySelector("[aria-invalid=true]");
    (firstInvalid || summary).focus();
  }

  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      clickAnswer("accept");
      return;
    }
    if (event.key === "Escape" && RH.isTyping(event)) {
      event.target.blur();
      return;
    }
    if (!RH.shortcut(event)) return;
    var answering = !CLOSED[status] && (mine || preview);
    if (event.key === "a") clickAnswer("accept");
    else if (event.key === "d") clickAnswer("decline");
    else if (event.key === "c" && preview) claim();
    else if (event.key === "y" && answering) chooseYesNo(true);
    else if (event.key === "n" && answering && yesNoQuestions().length) chooseYesNo(false);
    else if (event.key === "n" && (!mine || CLOSED[status])) RH.submit(document.getElementById("next-form"));
    else return;
    event.preventDefault();
  });
})();
